//! Weight dumps round-trip: what is read back equals the model's weights in device memory
//! (the mock's), bit for bit, in `f32` and `bf16`; a model made from the dump decodes as the
//! original; malformed dumps are refused with typed errors. And `decode_bench` itself: its
//! dump, its greedy tokens and its logits equal the host reference's.

mod common;

use accel_graph::{Backend, half::bf16, mock::MockBackend};
use accel_graph_decode::{
    Config, DecodeElement, Engine, EngineOptions, Model, StepRow,
    dump::{self, ALIGNMENT, DATA, DumpError, DumpInfo, HEADER},
    init::prompt,
    model::{HostWeights, Reference, Tensor},
};
use common::{SEED, bits, temp_dir};

fn round_trip<T: DecodeElement>() -> Result<(), Box<dyn std::error::Error>> {
    let b = MockBackend::new();
    let config = Config::tiny();
    let model = Model::<_, T>::random(&b, config, SEED)?;
    let dir = temp_dir();
    let info =
        DumpInfo::new()
            .preset("tiny")
            .seed(SEED)
            .prompt(prompt(SEED, 0, 8, config.vocab as u32));
    let written = dump::write_model(dir.path(), &model, &info)?;
    let (header, back) = dump::read::<T>(dir.path())?;
    assert_eq!(header, written);
    assert_eq!(header.config, config);
    assert_eq!(header.dtype, T::NAME);
    assert_eq!(header.info, info);
    let file_bytes = std::fs::metadata(dir.path().join(DATA))?.len();
    assert_eq!(header.data_bytes, file_bytes);
    let all = Tensor::all(&config);
    assert_eq!(header.tensors.len(), all.len());
    for t in all {
        let entry = header.entry(t).expect("every tensor listed");
        assert_eq!(entry.offset % ALIGNMENT, 0, "{}", entry.name);
        assert_eq!(entry.bytes as usize, t.len(&config) * T::BYTES);
        let on_device = b.download(model.weights().get(t).expect("tensor"))?;
        let read = back.get(t).expect("tensor read back");
        assert_eq!(bits(read), bits(&on_device), "{} differs", entry.name);
    }
    // The same as generating from the seed on the host.
    let generated = HostWeights::<T>::random(&config, SEED);
    for t in Tensor::all(&config) {
        assert_eq!(
            bits(back.get(t).expect("read")),
            bits(generated.get(t).expect("made"))
        );
    }

    // A model made from the dump decodes as the original, bit for bit.
    let options = || EngineOptions::new().buckets([1, 2]);
    let mut original = Engine::new(model, options())?;
    let mut loaded = Engine::new(Model::from_host(&b, config, &back)?, options())?;
    let mut last = [3u32, 5u32];
    for pos in 0..6u32 {
        let rows: Vec<StepRow> = (0..2u32)
            .map(|s| StepRow::new(s, last[s as usize], pos))
            .collect();
        let a = original.step(&rows)?;
        let c = loaded.step(&rows)?;
        assert_eq!(a.tokens, c.tokens);
        assert_eq!(bits(&original.last_logits()?), bits(&loaded.last_logits()?));
        last = [a.tokens[0], a.tokens[1]];
    }
    Ok(())
}

#[test]
fn f32_dump_round_trips() -> Result<(), Box<dyn std::error::Error>> {
    round_trip::<f32>()
}

#[test]
fn bf16_dump_round_trips() -> Result<(), Box<dyn std::error::Error>> {
    round_trip::<bf16>()
}

#[test]
fn the_header_is_json_with_the_documented_fields() -> Result<(), Box<dyn std::error::Error>> {
    let dir = temp_dir();
    let config = Config::tiny();
    dump::write_host(
        dir.path(),
        &config,
        &HostWeights::<bf16>::random(&config, 1),
        &DumpInfo::new(),
    )?;
    let text = std::fs::read_to_string(dir.path().join(HEADER))?;
    for field in [
        "\"format\": \"accel-graph-decode-weights\"",
        "\"version\": 1",
        "\"dtype\": \"bf16\"",
        "\"data\": \"weights.bin\"",
        "\"preset\": null",
        "\"seed\": null",
        "\"prompt\": []",
        "\"rms_eps\": 1e-5",
        "\"rope_theta\": 10000.0",
        "{\"name\": \"embed\", \"shape\": [256, 64], \"dtype\": \"bf16\", \"offset\": 0, \"bytes\": 32768}",
        "{\"name\": \"final_norm\", \"shape\": [64], \"dtype\": \"bf16\", \"offset\": 32768, \"bytes\": 128}",
        "\"name\": \"layers.1.down\", \"shape\": [64, 128]",
    ] {
        assert!(text.contains(field), "{field} not in\n{text}");
    }
    let header = dump::read_header(dir.path())?;
    assert_eq!(header.config.rms_eps, 1e-5);
    assert_eq!(header.info, DumpInfo::new());
    Ok(())
}

#[test]
fn bad_dumps_are_refused() -> Result<(), Box<dyn std::error::Error>> {
    let config = Config::tiny();
    let missing = temp_dir();
    assert!(matches!(
        dump::read::<f32>(&missing.path().join("none")),
        Err(DumpError::Io { .. })
    ));

    let dir = temp_dir();
    dump::write_host(
        dir.path(),
        &config,
        &HostWeights::<f32>::random(&config, 1),
        &DumpInfo::new(),
    )?;
    // Another element type.
    let err = dump::read::<bf16>(dir.path()).unwrap_err();
    assert!(
        matches!(&err, DumpError::Format { message, .. } if message.contains("f32")),
        "{err}"
    );
    // A data file cut short.
    let data = dir.path().join(DATA);
    let full = std::fs::read(&data)?;
    std::fs::write(&data, &full[..full.len() - 4])?;
    let err = dump::read::<f32>(dir.path()).unwrap_err();
    assert!(matches!(err, DumpError::Format { .. }), "{err}");
    std::fs::write(&data, &full)?;
    // A header that is not JSON, or lists a tensor of another shape.
    let header_path = dir.path().join(HEADER);
    let header = std::fs::read_to_string(&header_path)?;
    std::fs::write(&header_path, &header[..header.len() / 2])?;
    assert!(matches!(
        dump::read::<f32>(dir.path()),
        Err(DumpError::Format { .. })
    ));
    std::fs::write(
        &header_path,
        header.replace("\"shape\": [256, 64]", "\"shape\": [64, 256]"),
    )?;
    let err = dump::read::<f32>(dir.path()).unwrap_err();
    assert!(
        matches!(&err, DumpError::Format { message, .. } if message.contains("embed")),
        "{err}"
    );
    // A tensor of the wrong length handed to the writer.
    let err = dump::write_with(dir.path(), &config, &DumpInfo::new(), |t| {
        Ok::<_, DumpError>(vec![0.0f32; t.len(&config) - 1])
    })
    .unwrap_err();
    assert!(matches!(err, DumpError::Format { .. }), "{err}");
    // An invalid config.
    let bad = Config {
        kv_heads: 3,
        ..config
    };
    let err = dump::write_with(dir.path(), &bad, &DumpInfo::new(), |_| {
        Ok::<_, DumpError>(vec![0.0f32])
    })
    .unwrap_err();
    assert!(matches!(err, DumpError::Model(_)), "{err}");
    Ok(())
}

#[test]
fn f32_files_round_trip() -> Result<(), DumpError> {
    let dir = temp_dir();
    std::fs::create_dir_all(dir.path()).map_err(|source| DumpError::Io {
        path: dir.path().to_owned(),
        source,
    })?;
    let path = dir.path().join("logits.f32");
    let values = [1.5f32, -0.0, f32::MIN_POSITIVE, 3.0e38];
    dump::write_f32s(&path, &values)?;
    assert_eq!(dump::read_f32s(&path)?, values);
    Ok(())
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("{key} not in {line}"))
}

/// `decode_bench --dump-weights`, then `--weights` on the mock: its greedy tokens and the
/// logits it dumps equal the host reference's for the dump's prompt, and its bench lines
/// have the documented fields.
#[test]
fn decode_bench_matches_the_reference() -> Result<(), Box<dyn std::error::Error>> {
    let bin = env!("CARGO_BIN_EXE_decode_bench");
    let dir = temp_dir();
    let weights = dir.path().join("tiny");
    let logits = dir.path().join("logits.f32");
    let run = |args: &[&str]| -> Result<String, Box<dyn std::error::Error>> {
        let out = std::process::Command::new(bin).args(args).output()?;
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8(out.stdout)?)
    };
    let w = weights.to_str().expect("UTF-8 path");
    run(&[
        "--dump-weights",
        w,
        "--config",
        "tiny",
        "--dtype",
        "f32",
        "--seed",
        "5",
        "--prompt-len",
        "6",
    ])?;
    let out = run(&[
        "--backend",
        "mock",
        "--weights",
        w,
        "--phases",
        "tokens,bench",
        "--tokens",
        "5",
        "--context",
        "4",
        "--batches",
        "1,2",
        "--warmup",
        "1",
        "--steps",
        "2",
        "--eager-steps",
        "1",
        "--dump-logits",
        logits.to_str().expect("UTF-8 path"),
    ])?;

    let config = Config::tiny();
    let prompt_tokens = prompt(5, 0, 6, config.vocab as u32);
    let mut reference = Reference::<f32>::new(config, dump::read::<f32>(&weights)?.1, 1);
    let (mut want_tokens, mut want_logits, mut next) = (Vec::new(), Vec::new(), 0u32);
    for pos in 0..prompt_tokens.len() + 4 {
        let token = prompt_tokens.get(pos).copied().unwrap_or(next);
        let step = reference.step(&[StepRow::new(0, token, pos as u32)])?;
        next = step.tokens[0];
        if pos < prompt_tokens.len() {
            want_logits.extend(step.logits);
        }
        if pos + 1 >= prompt_tokens.len() {
            want_tokens.push(next.to_string());
        }
    }
    let tokens = out
        .lines()
        .find(|l| l.starts_with("tokens "))
        .expect("a tokens line");
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    assert_eq!(field(tokens, "prompt"), list(&prompt_tokens));
    assert_eq!(field(tokens, "tokens"), want_tokens.join(","));
    assert_eq!(bits(&dump::read_f32s(&logits)?), bits(&want_logits));

    let bench: Vec<&str> = out.lines().filter(|l| l.starts_with("bench ")).collect();
    assert_eq!(bench.len(), 4, "{out}");
    for (line, (mode, batch)) in bench.iter().zip([
        ("graph", "1"),
        ("graph", "2"),
        ("eager", "1"),
        ("eager", "2"),
    ]) {
        assert_eq!(field(line, "impl"), "accel");
        assert_eq!(field(line, "mode"), mode);
        assert_eq!(field(line, "batch"), batch);
        assert_eq!(field(line, "config"), "tiny");
        assert_eq!(field(line, "context"), "4");
        for key in ["median_us", "p10_us", "p90_us"] {
            let v: f64 = field(line, key).parse()?;
            assert!(v > 0.0, "{line}");
        }
    }
    Ok(())
}
