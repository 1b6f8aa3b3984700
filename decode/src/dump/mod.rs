//! Weight dumps: a model's config and weights in a directory, in a raw format another
//! framework (PyTorch, NumPy) loads without this crate — so both run exactly the same weights.
//!
//! A dump is two files:
//!
//! * `model.json` ([`HEADER`]): `format` (`"accel-graph-decode-weights"`), `version` (1),
//!   `dtype` (`"f32"` or `"bf16"`, every tensor's), `data` (the data file's name), `data_bytes`,
//!   `alignment` (64), `preset` and `seed` (the preset and seed the weights came from, or `null`),
//!   `prompt` (token ids of a fixed prompt for both sides' greedy runs: sequence 0 of
//!   [`crate::init::prompt`] for the seed), `config` (every field of [`Config`] by name) and
//!   `tensors`: one object per tensor in [`Tensor::all`]'s order with `name`
//!   ([`Tensor::name`]), `shape` (`[rows, columns]`, or `[hidden]` for a norm's weight), `dtype`,
//!   `offset` and `bytes` (where it lies in the data file).
//! * `weights.bin` ([`DATA`]): each tensor's elements row-major, little-endian (`bf16` as its
//!   16 bits), at its offset; offsets are multiples of 64 bytes, the gaps zeros.
//!
//! Matrices are `[out_features, in_features]`, as `torch.nn.Linear.weight` holds them. The
//! fused projections keep their order: `qkv` is the query rows, then the key rows, then the
//! value rows; `gate_up` the gate rows, then the up rows.
//!
//! ```
//! use accel_graph_decode::{Config, dump, model::HostWeights};
//! let dir = std::env::temp_dir().join(format!("decode-dump-doc-{}", std::process::id()));
//! let config = Config::tiny();
//! let weights = HostWeights::<f32>::random(&config, 3);
//! dump::write_host(&dir, &config, &weights, &dump::DumpInfo::new().seed(3))?;
//! let (header, back) = dump::read::<f32>(&dir)?;
//! assert_eq!((header.config, header.info.seed), (config, Some(3)));
//! assert_eq!(back, weights);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), dump::DumpError>(())
//! ```

mod json;

use std::{
    convert::Infallible,
    fmt,
    fs::File,
    io::{BufWriter, Read, Seek, SeekFrom, Write},
    path::{Path, PathBuf},
};

use accel_graph::{Backend, GraphError};

use crate::{
    Config, DecodeElement, Model,
    model::{HostWeights, Tensor, Weights},
};
use json::{Json, quote};

/// The header's file name in a dump directory.
pub const HEADER: &str = "model.json";
/// The data file's name in a dump directory.
pub const DATA: &str = "weights.bin";
/// The header's `format`.
pub const FORMAT: &str = "accel-graph-decode-weights";
/// The header's `version`.
pub const VERSION: u64 = 1;
/// Every tensor's offset in the data file is a multiple of this many bytes.
pub const ALIGNMENT: u64 = 64;

/// What can go wrong writing or reading a dump.
#[derive(Debug)]
#[non_exhaustive]
pub enum DumpError {
    /// A file could not be made, written or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file is not a dump of the kind asked for: a malformed header, a missing or misshapen
    /// tensor, another element type, a data file shorter than the header says.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Reading the weights from the device failed, or the config is invalid.
    Model(GraphError),
}

impl fmt::Display for DumpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DumpError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            DumpError::Format { path, message } => {
                write!(f, "{}: not a usable weight dump: {message}", path.display())
            }
            DumpError::Model(e) => write!(f, "weight dump: {e}"),
        }
    }
}

impl std::error::Error for DumpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DumpError::Io { source, .. } => Some(source),
            DumpError::Model(e) => Some(e),
            DumpError::Format { .. } => None,
        }
    }
}

impl From<GraphError> for DumpError {
    fn from(e: GraphError) -> Self {
        DumpError::Model(e)
    }
}

impl From<Infallible> for DumpError {
    fn from(e: Infallible) -> Self {
        match e {}
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DumpError + '_ {
    move |source| DumpError::Io {
        path: path.to_owned(),
        source,
    }
}

fn format_error(path: &Path, message: impl Into<String>) -> DumpError {
    DumpError::Format {
        path: path.to_owned(),
        message: message.into(),
    }
}

/// What a dump records besides the config and the weights.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DumpInfo {
    /// The preset the config came from (`small`, ...).
    pub preset: Option<String>,
    /// The seed the weights came from ([`Tensor::random`]).
    pub seed: Option<u64>,
    /// A fixed prompt (token ids) for greedy runs on both sides.
    pub prompt: Vec<u32>,
}

impl DumpInfo {
    /// Nothing recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the preset's name.
    pub fn preset(mut self, name: impl Into<String>) -> Self {
        self.preset = Some(name.into());
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the prompt.
    pub fn prompt(mut self, tokens: impl Into<Vec<u32>>) -> Self {
        self.prompt = tokens.into();
        self
    }
}

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorEntry {
    /// [`Tensor::name`].
    pub name: String,
    /// `[rows, columns]`, or `[hidden]` for a norm's weight.
    pub shape: Vec<usize>,
    /// Byte offset in the data file.
    pub offset: u64,
    /// Bytes of its data.
    pub bytes: u64,
}

/// A dump's header.
#[derive(Debug, Clone, PartialEq)]
pub struct DumpHeader {
    /// The model's sizes.
    pub config: Config,
    /// The element type's name ([`DecodeElement::NAME`]).
    pub dtype: String,
    /// Preset, seed, prompt.
    pub info: DumpInfo,
    /// Every tensor, in [`Tensor::all`]'s order.
    pub tensors: Vec<TensorEntry>,
    /// Bytes of the data file.
    pub data_bytes: u64,
}

impl DumpHeader {
    /// The header of a dump of `config`'s tensors in elements of `bytes_per_element` bytes.
    fn layout(config: &Config, dtype: &str, bytes_per_element: usize, info: &DumpInfo) -> Self {
        let mut at = 0u64;
        let tensors = Tensor::all(config)
            .into_iter()
            .map(|t| {
                let [rows, cols] = t.shape(config);
                let bytes = (t.len(config) * bytes_per_element) as u64;
                let entry = TensorEntry {
                    name: t.name(),
                    shape: if t.is_vector() {
                        vec![cols]
                    } else {
                        vec![rows, cols]
                    },
                    offset: at,
                    bytes,
                };
                at = (at + bytes).div_ceil(ALIGNMENT) * ALIGNMENT;
                entry
            })
            .collect::<Vec<_>>();
        let data_bytes = tensors.last().map_or(0, |t| t.offset + t.bytes);
        DumpHeader {
            config: *config,
            dtype: dtype.to_owned(),
            info: info.clone(),
            tensors,
            data_bytes,
        }
    }

    /// The entry of `tensor`.
    pub fn entry(&self, tensor: Tensor) -> Option<&TensorEntry> {
        let name = tensor.name();
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The header as JSON.
    pub fn to_json(&self) -> String {
        let c = &self.config;
        let opt = |v: Option<String>| v.unwrap_or_else(|| "null".to_owned());
        let list = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(", ");
        let mut out = String::new();
        out.push_str("{\n");
        out.push_str(&format!("  \"format\": {},\n", quote(FORMAT)));
        out.push_str(&format!("  \"version\": {VERSION},\n"));
        out.push_str(&format!("  \"dtype\": {},\n", quote(&self.dtype)));
        out.push_str(&format!("  \"data\": {},\n", quote(DATA)));
        out.push_str(&format!("  \"data_bytes\": {},\n", self.data_bytes));
        out.push_str(&format!("  \"alignment\": {ALIGNMENT},\n"));
        out.push_str(&format!(
            "  \"preset\": {},\n",
            opt(self.info.preset.as_deref().map(quote))
        ));
        out.push_str(&format!(
            "  \"seed\": {},\n",
            opt(self.info.seed.map(|s| s.to_string()))
        ));
        out.push_str(&format!(
            "  \"prompt\": [{}],\n",
            list(&mut self.info.prompt.iter().map(u32::to_string))
        ));
        out.push_str(&format!(
            "  \"config\": {{\"vocab\": {}, \"hidden\": {}, \"layers\": {}, \"heads\": {}, \
             \"kv_heads\": {}, \"head_dim\": {}, \"intermediate\": {}, \"max_len\": {}, \
             \"rope_theta\": {:?}, \"rms_eps\": {:?}, \"attention_chunk\": {}}},\n",
            c.vocab,
            c.hidden,
            c.layers,
            c.heads,
            c.kv_heads,
            c.head_dim,
            c.intermediate,
            c.max_len,
            c.rope_theta,
            c.rms_eps,
            c.attention_chunk
        ));
        out.push_str("  \"tensors\": [\n");
        for (i, t) in self.tensors.iter().enumerate() {
            out.push_str(&format!(
                "    {{\"name\": {}, \"shape\": [{}], \"dtype\": {}, \"offset\": {}, \"bytes\": {}}}{}\n",
                quote(&t.name),
                list(&mut t.shape.iter().map(usize::to_string)),
                quote(&self.dtype),
                t.offset,
                t.bytes,
                if i + 1 < self.tensors.len() { "," } else { "" }
            ));
        }
        out.push_str("  ]\n}\n");
        out
    }

    /// Parses a header written by [`DumpHeader::to_json`] (`path` names it in errors).
    pub fn from_json(text: &str, path: &Path) -> Result<Self, DumpError> {
        let bad = |m: String| format_error(path, m);
        let v = Json::parse(text).map_err(|e| bad(format!("header is not JSON: {e}")))?;
        if v.get("format").and_then(Json::as_str) != Some(FORMAT) {
            return Err(bad(format!("\"format\" is not {FORMAT:?}")));
        }
        let version = v.get("version").and_then(Json::as_u64);
        if version != Some(VERSION) {
            return Err(bad(format!(
                "version {version:?}, this reader knows {VERSION}"
            )));
        }
        let field = |obj: &Json, key: &str| -> Result<u64, DumpError> {
            obj.get(key)
                .and_then(Json::as_u64)
                .ok_or_else(|| bad(format!("\"{key}\" is missing or not an integer")))
        };
        let size = |obj: &Json, key: &str| field(obj, key).map(|n| n as usize);
        let dtype = v
            .get("dtype")
            .and_then(Json::as_str)
            .ok_or_else(|| bad("\"dtype\" is missing".to_owned()))?
            .to_owned();
        let c = v
            .get("config")
            .ok_or_else(|| bad("\"config\" is missing".to_owned()))?;
        let float = |key: &str| {
            c.get(key)
                .and_then(Json::as_f32)
                .ok_or_else(|| bad(format!("config \"{key}\" is missing or not a number")))
        };
        let config = Config {
            vocab: size(c, "vocab")?,
            hidden: size(c, "hidden")?,
            layers: size(c, "layers")?,
            heads: size(c, "heads")?,
            kv_heads: size(c, "kv_heads")?,
            head_dim: size(c, "head_dim")?,
            intermediate: size(c, "intermediate")?,
            max_len: size(c, "max_len")?,
            rope_theta: float("rope_theta")?,
            rms_eps: float("rms_eps")?,
            attention_chunk: size(c, "attention_chunk")?,
        };
        let preset = v.get("preset").and_then(Json::as_str).map(str::to_owned);
        let seed = v.get("seed").and_then(Json::as_u64);
        let prompt = match v.get("prompt").and_then(Json::as_array) {
            Some(items) => items
                .iter()
                .map(|t| {
                    t.as_u64()
                        .and_then(|t| u32::try_from(t).ok())
                        .ok_or_else(|| bad("\"prompt\" holds a non-token".to_owned()))
                })
                .collect::<Result<Vec<u32>, _>>()?,
            None => Vec::new(),
        };
        let tensors = v
            .get("tensors")
            .and_then(Json::as_array)
            .ok_or_else(|| bad("\"tensors\" is missing".to_owned()))?
            .iter()
            .map(|t| {
                let name = t
                    .get("name")
                    .and_then(Json::as_str)
                    .ok_or_else(|| bad("a tensor has no \"name\"".to_owned()))?
                    .to_owned();
                let shape = t
                    .get("shape")
                    .and_then(Json::as_array)
                    .and_then(|s| {
                        s.iter()
                            .map(|d| d.as_u64().map(|d| d as usize))
                            .collect::<Option<Vec<_>>>()
                    })
                    .ok_or_else(|| bad(format!("tensor {name}: bad \"shape\"")))?;
                if t.get("dtype").and_then(Json::as_str) != Some(dtype.as_str()) {
                    return Err(bad(format!("tensor {name}: dtype is not {dtype}")));
                }
                Ok(TensorEntry {
                    shape,
                    offset: field(t, "offset")?,
                    bytes: field(t, "bytes")?,
                    name,
                })
            })
            .collect::<Result<Vec<_>, DumpError>>()?;
        Ok(DumpHeader {
            config,
            dtype,
            info: DumpInfo {
                preset,
                seed,
                prompt,
            },
            tensors,
            data_bytes: field(&v, "data_bytes")?,
        })
    }
}

/// Writes a dump of `config`'s model into `dir` (made if missing; its [`HEADER`] and [`DATA`]
/// replaced), one tensor at a time: `tensor` gives each tensor's elements, in [`Tensor::all`]'s
/// order, so a model larger than the host's memory can be dumped. Returns the header.
///
/// Errors: `config` invalid or `tensor` failing ([`DumpError::Model`]), a tensor of the wrong
/// length ([`DumpError::Format`]), the files ([`DumpError::Io`]).
pub fn write_with<T: DecodeElement, E>(
    dir: &Path,
    config: &Config,
    info: &DumpInfo,
    mut tensor: impl FnMut(Tensor) -> Result<Vec<T>, E>,
) -> Result<DumpHeader, DumpError>
where
    DumpError: From<E>,
{
    config.validate()?;
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let header = DumpHeader::layout(config, T::NAME, T::BYTES, info);
    let data_path = dir.join(DATA);
    let mut out =
        BufWriter::with_capacity(1 << 22, File::create(&data_path).map_err(io(&data_path))?);
    let mut at = 0u64;
    let mut bytes = Vec::new();
    for (t, entry) in Tensor::all(config).into_iter().zip(&header.tensors) {
        let values = tensor(t)?;
        if values.len() != t.len(config) {
            return Err(format_error(
                &data_path,
                format!(
                    "tensor {} has {} elements, its shape {:?} takes {}",
                    entry.name,
                    values.len(),
                    entry.shape,
                    t.len(config)
                ),
            ));
        }
        let pad = (entry.offset - at) as usize;
        out.write_all(&vec![0u8; pad]).map_err(io(&data_path))?;
        bytes.clear();
        bytes.resize(values.len() * T::BYTES, 0);
        for (v, b) in values.iter().zip(bytes.chunks_exact_mut(T::BYTES)) {
            v.write_le(b);
        }
        out.write_all(&bytes).map_err(io(&data_path))?;
        at = entry.offset + entry.bytes;
    }
    out.flush().map_err(io(&data_path))?;
    let header_path = dir.join(HEADER);
    std::fs::write(&header_path, header.to_json()).map_err(io(&header_path))?;
    Ok(header)
}

/// Writes a dump of host weights ([`write_with`]).
pub fn write_host<T: DecodeElement>(
    dir: &Path,
    config: &Config,
    weights: &HostWeights<T>,
    info: &DumpInfo,
) -> Result<DumpHeader, DumpError> {
    write_with(dir, config, info, |t| {
        weights
            .get(t)
            .cloned()
            .ok_or_else(|| GraphError::ArgumentMismatch(format!("weights: {t:?} is missing")))
    })
}

/// Writes a dump of a model's weights as they are in device memory (each tensor downloaded in
/// turn, [`write_with`]).
pub fn write_model<B: Backend, T: DecodeElement>(
    dir: &Path,
    model: &Model<B, T>,
    info: &DumpInfo,
) -> Result<DumpHeader, DumpError> {
    let backend = model.backend();
    write_with(dir, model.config(), info, |t| {
        let buffer = model
            .weights()
            .get(t)
            .ok_or_else(|| GraphError::ArgumentMismatch(format!("weights: {t:?} is missing")))?;
        backend.download(buffer)
    })
}

/// Reads the header of the dump in `dir`.
pub fn read_header(dir: &Path) -> Result<DumpHeader, DumpError> {
    let path = dir.join(HEADER);
    let text = std::fs::read_to_string(&path).map_err(io(&path))?;
    DumpHeader::from_json(&text, &path)
}

/// Reads the dump in `dir` as elements `T`: its header and weights.
///
/// Errors: [`DumpError::Io`]; [`DumpError::Format`] for a malformed header, another element
/// type than `T`, a tensor missing or of another shape than the config gives, or a data file
/// shorter than the header says; [`DumpError::Model`] for an invalid config.
pub fn read<T: DecodeElement>(dir: &Path) -> Result<(DumpHeader, HostWeights<T>), DumpError> {
    let header = read_header(dir)?;
    let header_path = dir.join(HEADER);
    if header.dtype != T::NAME {
        return Err(format_error(
            &header_path,
            format!(
                "it holds {} weights, {} were asked for",
                header.dtype,
                T::NAME
            ),
        ));
    }
    header.config.validate()?;
    let config = header.config;
    let data_path = dir.join(DATA);
    let mut file = File::open(&data_path).map_err(io(&data_path))?;
    let file_bytes = file.metadata().map_err(io(&data_path))?.len();
    let mut bytes = Vec::new();
    let weights = Weights::try_build(&config, |t| {
        let entry = header
            .entry(t)
            .ok_or_else(|| format_error(&header_path, format!("tensor {} is missing", t.name())))?;
        let [rows, cols] = t.shape(&config);
        let want_shape = if t.is_vector() {
            vec![cols]
        } else {
            vec![rows, cols]
        };
        let want_bytes = (t.len(&config) * T::BYTES) as u64;
        if entry.shape != want_shape || entry.bytes != want_bytes {
            return Err(format_error(
                &header_path,
                format!(
                    "tensor {}: shape {:?} of {} bytes, the config gives {want_shape:?} of \
                     {want_bytes}",
                    entry.name, entry.shape, entry.bytes
                ),
            ));
        }
        if entry.offset.saturating_add(entry.bytes) > file_bytes {
            return Err(format_error(
                &data_path,
                format!(
                    "tensor {} lies at {}..{}, past the file's {file_bytes} bytes",
                    entry.name,
                    entry.offset,
                    entry.offset + entry.bytes
                ),
            ));
        }
        file.seek(SeekFrom::Start(entry.offset))
            .map_err(io(&data_path))?;
        bytes.resize(entry.bytes as usize, 0);
        file.read_exact(&mut bytes).map_err(io(&data_path))?;
        Ok(bytes.chunks_exact(T::BYTES).map(T::read_le).collect())
    })?;
    Ok((header, weights))
}

/// Writes `values` to `path` as raw little-endian `f32`s (logits for a cross-check).
pub fn write_f32s(path: &Path, values: &[f32]) -> Result<(), DumpError> {
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(path, bytes).map_err(io(path))
}

/// Reads a file of raw little-endian `f32`s ([`write_f32s`]).
pub fn read_f32s(path: &Path) -> Result<Vec<f32>, DumpError> {
    let bytes = std::fs::read(path).map_err(io(path))?;
    if !bytes.len().is_multiple_of(4) {
        return Err(format_error(
            path,
            format!("{} bytes is not a whole number of f32s", bytes.len()),
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}
