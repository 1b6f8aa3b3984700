//! Users' CUDA C kernels compiled by NVRTC (loaded at run time through cudarc) to a binary for
//! the device: a cubin for `sm_XY` of the device's compute capability, which the driver loads
//! without a JIT step and which runs on any driver of the same major version; PTX for
//! `compute_XY` only when the NVRTC in use cannot target the device's architecture (a device
//! newer than the NVRTC: the driver then JIT-compiles the PTX of the newest architecture that
//! NVRTC knows, which needs a driver at least as new as that NVRTC). Binaries are kept in the
//! disk cache ([`crate::kernel_cache`]).

use std::ffi::{CStr, CString, c_char, c_int};

use accel_graph_api::{GraphError, kernel::Kernel};
use accel_graph_driver::{DriverError, DriverResult};
use cudarc::nvrtc::sys::{self, nvrtcResult};

use crate::{
    kernel_cache::{self, CacheKey},
    libs::NVRTC,
};

/// What NVRTC produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ImageKind {
    /// Machine code for one `sm_XY` architecture.
    Cubin,
    /// PTX text (NUL-terminated), JIT-compiled by the driver at load.
    Ptx,
}

impl ImageKind {
    /// The cache file's extension.
    fn extension(self) -> &'static str {
        match self {
            ImageKind::Cubin => "cubin",
            ImageKind::Ptx => "ptx",
        }
    }
}

/// The architecture a kernel is compiled for (`sm_90`, `compute_90`, `sm_90a`...) and what
/// that produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Target {
    /// The value of NVRTC's `--gpu-architecture`.
    pub(crate) arch: String,
    /// Whether it is machine code or PTX.
    pub(crate) kind: ImageKind,
    /// Whether the arch came from the kernel's own options (then no option is added).
    pub(crate) from_options: bool,
}

impl Target {
    fn of(arch: String, from_options: bool) -> Self {
        // `sm_XY` (and `sm_XYa`) produce a cubin; `compute_XY` produces PTX only.
        let kind = if arch.starts_with("sm_") {
            ImageKind::Cubin
        } else {
            ImageKind::Ptx
        };
        Target {
            arch,
            kind,
            from_options,
        }
    }
}

/// The architecture the kernel's own options ask for, if any (`-arch=sm_90a`,
/// `--gpu-architecture=compute_80`, or the flag and its value as two options): the user's
/// choice wins over the device's.
pub(crate) fn arch_in_options(options: &[String]) -> Option<String> {
    let flags = ["--gpu-architecture", "-arch"];
    let mut it = options.iter();
    while let Some(option) = it.next() {
        for flag in flags {
            if option == flag {
                return it.next().cloned();
            }
            if let Some(value) = option
                .strip_prefix(flag)
                .and_then(|rest| rest.strip_prefix('='))
            {
                return Some(value.to_owned());
            }
        }
    }
    None
}

/// The target for a device of compute capability `(major, minor)` given the architectures
/// NVRTC supports (`None`: NVRTC cannot tell, too old to list them): `sm_XY` of the device if
/// NVRTC supports it; else `compute_` of the newest supported architecture below the
/// device's, whose PTX the driver JIT-compiles forward; else an error naming both.
pub(crate) fn choose_target(
    (major, minor): (i32, i32),
    supported: Option<&[i32]>,
) -> Result<Target, String> {
    let arch = major * 10 + minor;
    let Some(supported) = supported else {
        return Ok(Target::of(format!("sm_{arch}"), false));
    };
    if supported.contains(&arch) {
        return Ok(Target::of(format!("sm_{arch}"), false));
    }
    match supported.iter().copied().filter(|&a| a < arch).max() {
        Some(older) => Ok(Target::of(format!("compute_{older}"), false)),
        None => Err(format!(
            "this NVRTC targets architectures {supported:?}, none at or below the device's \
             sm_{arch}: use an NVRTC of an older CUDA toolkit"
        )),
    }
}

/// The compiled binary of a kernel.
#[derive(Debug)]
pub(crate) struct Compiled {
    /// Cubin bytes, or NUL-terminated PTX.
    pub(crate) image: Vec<u8>,
    /// Which of the two.
    pub(crate) kind: ImageKind,
    /// The architecture's number (`90` for `sm_90`, `sm_90a` and `compute_90`), 0 if the
    /// kernel's own options name one this cannot read.
    pub(crate) arch: u32,
}

impl Target {
    /// The architecture's number: the digits after `sm_` or `compute_`.
    fn number(&self) -> u32 {
        let digits = self
            .arch
            .trim_start_matches("sm_")
            .trim_start_matches("compute_");
        let end = digits
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(digits.len());
        digits[..end].parse().unwrap_or(0)
    }
}

fn failed(kernel: &Kernel, message: impl Into<String>) -> DriverError {
    DriverError::Api(GraphError::KernelFailed {
        kernel: kernel.name().to_owned(),
        message: message.into(),
    })
}

/// NVRTC's name of a result.
fn result_name(result: nvrtcResult) -> String {
    // SAFETY: NVRTC returns a static string for every result code.
    let text = unsafe { sys::nvrtcGetErrorString(result) };
    if text.is_null() {
        format!("{result:?}")
    } else {
        // SAFETY: a NUL-terminated static string (checked non-null).
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned()
    }
}

/// `(major, minor)` of the loaded NVRTC.
fn version() -> DriverResult<(i32, i32)> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: two local out-parameters.
    let rc = unsafe { sys::nvrtcVersion(&mut major, &mut minor) };
    if rc != nvrtcResult::NVRTC_SUCCESS {
        return Err(DriverError::Api(
            NVRTC.unavailable(&format!("nvrtcVersion failed: {}", result_name(rc))),
        ));
    }
    Ok((major, minor))
}

/// The architectures NVRTC can target, or `None` if it cannot list them.
fn supported_archs() -> Option<Vec<i32>> {
    // cudarc panics if the symbols are missing (an NVRTC before 11.2): then NVRTC cannot tell.
    std::panic::catch_unwind(|| {
        let mut count: c_int = 0;
        // SAFETY: a local out-parameter.
        if unsafe { sys::nvrtcGetNumSupportedArchs(&mut count) } != nvrtcResult::NVRTC_SUCCESS {
            return None;
        }
        let mut archs = vec![0 as c_int; usize::try_from(count).ok()?];
        // SAFETY: `archs` has room for the `count` entries NVRTC writes.
        if unsafe { sys::nvrtcGetSupportedArchs(archs.as_mut_ptr()) } != nvrtcResult::NVRTC_SUCCESS
        {
            return None;
        }
        Some(archs)
    })
    .ok()
    .flatten()
}

/// An NVRTC program, destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by `nvrtcCreateProgram` and is destroyed once.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

impl Program {
    /// The compilation log (warnings and errors).
    fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: live program, local out-parameter.
        if unsafe { sys::nvrtcGetProgramLogSize(self.0, &mut size) } != nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut log = vec![0 as c_char; size];
        // SAFETY: `log` has the size NVRTC asked for.
        if unsafe { sys::nvrtcGetProgramLog(self.0, log.as_mut_ptr()) }
            != nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        let bytes: Vec<u8> = log
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).trim().to_owned()
    }

    /// The binary of a compiled program: `size` then `get` (NVRTC's pairs for cubin and PTX).
    fn image(
        &self,
        size: unsafe fn(sys::nvrtcProgram, *mut usize) -> nvrtcResult,
        get: unsafe fn(sys::nvrtcProgram, *mut c_char) -> nvrtcResult,
    ) -> Result<Vec<u8>, nvrtcResult> {
        let mut len = 0usize;
        // SAFETY: live, compiled program; local out-parameter.
        let rc = unsafe { size(self.0, &mut len) };
        if rc != nvrtcResult::NVRTC_SUCCESS {
            return Err(rc);
        }
        let mut image = vec![0u8; len];
        // SAFETY: `image` has the size NVRTC asked for.
        let rc = unsafe { get(self.0, image.as_mut_ptr().cast()) };
        if rc != nvrtcResult::NVRTC_SUCCESS {
            return Err(rc);
        }
        Ok(image)
    }
}

/// Compiles `kernel` (whose CUDA C is `source`) for a device of compute capability `cc`, or
/// reads the binary from the disk cache. Errors: NVRTC missing
/// ([`GraphError::LibraryUnavailable`]), a compile error ([`GraphError::KernelFailed`] with
/// NVRTC's log).
pub(crate) fn compile(kernel: &Kernel, source: &str, cc: (i32, i32)) -> DriverResult<Compiled> {
    NVRTC.probe().map_err(DriverError::Api)?;
    NVRTC.guard(|| compile_loaded(kernel, source, cc))
}

fn compile_loaded(kernel: &Kernel, source: &str, cc: (i32, i32)) -> DriverResult<Compiled> {
    let nvrtc = version()?;
    let options = kernel.cuda_options();
    let target = match arch_in_options(options) {
        Some(arch) => Target::of(arch, true),
        None => choose_target(cc, supported_archs().as_deref())
            .map_err(|e| failed(kernel, format!("NVRTC {}.{}: {e}", nvrtc.0, nvrtc.1)))?,
    };
    if target.kind == ImageKind::Ptx && !target.from_options {
        tracing::info!(
            kernel = kernel.name(),
            nvrtc = %format_args!("{}.{}", nvrtc.0, nvrtc.1),
            device = %format_args!("sm_{}{}", cc.0, cc.1),
            target = %target.arch,
            "NVRTC cannot target the device's architecture: compiling PTX for the newest one it \
             knows, which the driver JIT-compiles at load"
        );
    }
    let key = CacheKey {
        name: kernel.name().to_owned(),
        source: source.to_owned(),
        options: options.to_vec(),
        nvrtc,
        target: target.arch.clone(),
    };
    let dir = kernel_cache::cache_dir();
    let extension = target.kind.extension();
    if let Some(image) = dir
        .as_deref()
        .and_then(|dir| kernel_cache::read(dir, &key, extension))
    {
        tracing::debug!(
            kernel = kernel.name(),
            target = %target.arch,
            "kernel binary from the disk cache"
        );
        return Ok(Compiled {
            image,
            kind: target.kind,
            arch: target.number(),
        });
    }
    let image = run_nvrtc(kernel, source, options, &target)?;
    kernel_cache::store(dir.as_deref(), &key, extension, &image);
    Ok(Compiled {
        image,
        kind: target.kind,
        arch: target.number(),
    })
}

/// One NVRTC compilation of `source` with `options` for `target`.
fn run_nvrtc(
    kernel: &Kernel,
    source: &str,
    options: &[String],
    target: &Target,
) -> DriverResult<Vec<u8>> {
    let nul = |what: &str| failed(kernel, format!("the {what} contains a NUL byte"));
    let c_source = CString::new(source).map_err(|_| nul("CUDA C source"))?;
    let c_name = CString::new(format!("{}.cu", kernel.name())).map_err(|_| nul("kernel name"))?;
    let mut c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()).map_err(|_| nul("option")))
        .collect::<DriverResult<Vec<_>>>()?;
    if !target.from_options {
        c_options.push(
            CString::new(format!("--gpu-architecture={}", target.arch))
                .map_err(|_| nul("architecture"))?,
        );
    }
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
    let count =
        c_int::try_from(option_ptrs.len()).map_err(|_| failed(kernel, "too many options"))?;

    let mut raw = std::ptr::null_mut();
    // SAFETY: `c_source` and `c_name` are NUL-terminated and outlive the call (NVRTC copies
    // them); no headers are passed.
    let rc = unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if rc != nvrtcResult::NVRTC_SUCCESS {
        return Err(failed(
            kernel,
            format!("nvrtcCreateProgram: {}", result_name(rc)),
        ));
    }
    let program = Program(raw);
    // SAFETY: live program; `option_ptrs` holds `count` NUL-terminated options that outlive
    // the call.
    let rc = unsafe { sys::nvrtcCompileProgram(program.0, count, option_ptrs.as_ptr()) };
    if rc != nvrtcResult::NVRTC_SUCCESS {
        let log = program.log();
        return Err(failed(
            kernel,
            format!(
                "NVRTC ({}, --gpu-architecture={}): {}{}",
                result_name(rc),
                target.arch,
                if log.is_empty() { "no log" } else { "\n" },
                log
            ),
        ));
    }
    let image = match target.kind {
        ImageKind::Cubin => program.image(sys::nvrtcGetCUBINSize, sys::nvrtcGetCUBIN),
        ImageKind::Ptx => program.image(sys::nvrtcGetPTXSize, sys::nvrtcGetPTX),
    };
    image.map_err(|rc| {
        failed(
            kernel,
            format!(
                "NVRTC compiled the kernel but returned no {} for {}: {}",
                target.kind.extension(),
                target.arch,
                result_name(rc)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_devices_architecture_gives_a_cubin() {
        let archs = [75, 80, 86, 89, 90, 100, 120];
        assert_eq!(
            choose_target((9, 0), Some(&archs)),
            Ok(Target {
                arch: "sm_90".to_owned(),
                kind: ImageKind::Cubin,
                from_options: false
            })
        );
        assert_eq!(
            choose_target((8, 6), Some(&archs)).map(|t| t.arch),
            Ok("sm_86".to_owned())
        );
        // An NVRTC that cannot list its architectures: the device's, and NVRTC will say.
        assert_eq!(
            choose_target((9, 0), None).map(|t| t.arch),
            Ok("sm_90".to_owned())
        );
    }

    #[test]
    fn a_targets_number_is_its_architectures() {
        let number = |arch: &str| Target::of(arch.to_owned(), true).number();
        assert_eq!(number("sm_90"), 90);
        assert_eq!(number("sm_90a"), 90);
        assert_eq!(number("compute_100"), 100);
        assert_eq!(number("sm_86"), 86);
        assert_eq!(number("native"), 0);
    }

    #[test]
    fn a_device_newer_than_nvrtc_gets_ptx_of_the_newest_older_architecture() {
        let archs = [75, 80, 86, 89, 90];
        let target = choose_target((12, 0), Some(&archs)).expect("falls back");
        assert_eq!(target.arch, "compute_90");
        assert_eq!(target.kind, ImageKind::Ptx);
        // An architecture between two supported ones (sm_87 with NVRTC listing 86 and 89).
        assert_eq!(
            choose_target((8, 7), Some(&archs)).map(|t| t.arch),
            Ok("compute_86".to_owned())
        );
    }

    #[test]
    fn a_device_older_than_every_supported_architecture_is_an_error() {
        let err = choose_target((5, 2), Some(&[75, 80, 90])).expect_err("nothing to target");
        assert!(
            err.contains("sm_52") && err.contains("older CUDA toolkit"),
            "{err}"
        );
    }

    #[test]
    fn the_kernels_own_architecture_option_wins() {
        let opts = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(arch_in_options(&opts(&["-DX=1"])), None);
        assert_eq!(
            arch_in_options(&opts(&["-DX=1", "-arch=sm_90a"])),
            Some("sm_90a".to_owned())
        );
        assert_eq!(
            arch_in_options(&opts(&["--gpu-architecture=compute_80"])),
            Some("compute_80".to_owned())
        );
        assert_eq!(
            arch_in_options(&opts(&["--gpu-architecture", "sm_89"])),
            Some("sm_89".to_owned())
        );
        // An option that only starts like the flag is not it.
        assert_eq!(arch_in_options(&opts(&["-architecture-x"])), None);
        assert_eq!(Target::of("sm_90a".to_owned(), true).kind, ImageKind::Cubin);
        assert_eq!(
            Target::of("compute_80".to_owned(), true).kind,
            ImageKind::Ptx
        );
    }

    #[test]
    fn compiling_without_nvrtc_is_library_unavailable() {
        let kernel = Kernel::new("k").cuda("extern \"C\" __global__ void k() {}");
        let present = NVRTC.probe().is_ok();
        match compile(&kernel, kernel.cuda_source().unwrap_or_default(), (9, 0)) {
            Err(DriverError::Api(GraphError::LibraryUnavailable { library, .. })) => {
                assert!(!present, "NVRTC loads, yet the compile said it is missing");
                assert_eq!(library, "libnvrtc");
            }
            Ok(compiled) => {
                assert!(present);
                assert!(!compiled.image.is_empty());
            }
            Err(other) => assert!(present, "expected LibraryUnavailable, got {other:?}"),
        }
    }
}
