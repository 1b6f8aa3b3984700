//! GEMM in WGSL: one tiled kernel, generated per element type and per way the operands share
//! memory, built on first use.
//!
//! Each workgroup computes a 16 × 16 tile of `C`; its invocations load 16 × 16 tiles of
//! `op(A)` and `op(B)` into workgroup memory, and each sums its element's products in `f32` in
//! order of `k` (so integer-valued operands give the exact result, whatever the shader
//! compiler fuses). `C = alpha · sum + beta · C`, and `C` is not read when `beta` is 0.
//!
//! **16-bit elements.** WGSL has no `bf16`, and `f16` needs an optional feature, so 16-bit
//! operands are bound as `array<u32>` and unpacked in integer arithmetic (exact for every
//! value, subnormals included, whatever the device's denormal mode); results are rounded to
//! nearest-even once, in integer arithmetic too (WGSL lets `pack2x16float` round either way),
//! bit for bit as the `half` crate rounds. Two neighbouring elements share a word, and the
//! invocations writing them may be in different workgroups (tiles, rows and batches meet
//! anywhere in a word when `n` or a view's offset is odd), so `C` is an `array<atomic<u32>>`
//! and each invocation replaces its half of the word with an `atomicAnd` that clears it and
//! an `atomicOr` that sets it: the two halves' writers touch disjoint bits, so neither can
//! undo the other's write, and the elements of the word outside `C`'s view keep their bits.
//!
//! **Shared memory.** WebGPU forbids one buffer bound read-only and read-write in one
//! dispatch, so when `A` or `B` lies in `C`'s buffer (views of one arena) the variant of the
//! kernel that reads it from `C`'s binding runs; a `C` that overlaps `A` or `B` is refused
//! (the product would read elements it writes, in an order no backend defines).

use std::sync::{Arc, OnceLock};

use accel_graph_api::{FloatType, Gemm, GraphError, NodeKind};
use accel_graph_driver::{DriverError, DriverResult, api::Bytes};
use wgpu::util::DeviceExt as _;

use crate::{
    command::Command,
    device::Gpu,
    kernels::{DispatchName, ResolvedDispatch},
    memory::WgpuBlock,
};

/// Rows and columns of a tile: the workgroup is `TILE × TILE` invocations.
const TILE: u32 = 16;

/// Element types × (`A` in `C`'s buffer) × (`B` in `C`'s buffer).
const VARIANTS: usize = 12;

/// The uniform block of the GEMM kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    batch: u32,
    trans_a: u32,
    trans_b: u32,
    alpha: f32,
    beta: f32,
    /// First element of each operand within the binding it is read from.
    a_off: u32,
    b_off: u32,
    c_off: u32,
    pad: u32,
}

/// Which kernel: the element type and whether `A` and `B` are read from `C`'s binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Variant {
    dtype: FloatType,
    a_in_c: bool,
    b_in_c: bool,
}

impl Variant {
    fn index(self) -> usize {
        let dtype = match self.dtype {
            FloatType::F32 => 0,
            FloatType::Bf16 => 1,
            FloatType::F16 => 2,
        };
        dtype * 4 + usize::from(self.a_in_c) * 2 + usize::from(self.b_in_c)
    }
}

/// A built GEMM kernel: its pipeline (with the layout WGSL's bindings imply).
#[derive(Debug)]
struct Built {
    pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

/// The GEMM pipelines of one device, each built the first time a product needs it (most
/// programs use one or two of them, and each costs a shader compilation).
#[derive(Debug, Default)]
pub(crate) struct GemmPipelines {
    built: [OnceLock<Result<Built, String>>; VARIANTS],
}

impl GemmPipelines {
    fn get(&self, device: &wgpu::Device, variant: Variant) -> DriverResult<&Built> {
        self.built[variant.index()]
            .get_or_init(|| build(device, variant))
            .as_ref()
            .map_err(|e| {
                DriverError::Api(GraphError::KernelFailed {
                    kernel: format!("gemm ({})", variant.dtype),
                    message: e.clone(),
                })
            })
    }
}

fn build(device: &wgpu::Device, variant: Variant) -> Result<Built, String> {
    let source = wgsl(variant);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("accel-graph gemm"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("accel-graph gemm"),
        // The layout WGSL's bindings imply: the variants bind different buffers.
        layout: None,
        module: &module,
        entry_point: Some("gemm"),
        compilation_options: Default::default(),
        cache: None,
    });
    let layout = pipeline.get_bind_group_layout(0);
    match pollster::block_on(scope.pop()) {
        Some(error) => Err(format!("building the GEMM kernel failed: {error}")),
        None => Ok(Built { pipeline, layout }),
    }
}

/// The WGSL that reads element `index` (an expression of `u32`) of an operand bound as
/// `binding`, as `f32`.
fn read(dtype: FloatType, binding: &str, index: &str) -> String {
    match (dtype, binding) {
        (FloatType::F32, _) => format!("{binding}[{index}]"),
        // 16-bit `C` is atomic: its words are read atomically.
        (_, "c") => format!("to_f32(half_of(atomicLoad(&c[({index}) >> 1u]), {index}))"),
        _ => format!("to_f32(half_of({binding}[({index}) >> 1u], {index}))"),
    }
}

/// The WGSL source of one variant.
fn wgsl(variant: Variant) -> String {
    let Variant {
        dtype,
        a_in_c,
        b_in_c,
    } = variant;
    let sixteen = dtype != FloatType::F32;
    let (input, output) = if sixteen {
        ("u32", "atomic<u32>")
    } else {
        ("f32", "f32")
    };
    let mut s = String::from(GEMM_PRELUDE);
    if !a_in_c {
        s += &format!("@group(0) @binding(1) var<storage, read> a: array<{input}>;\n");
    }
    if !b_in_c {
        s += &format!("@group(0) @binding(2) var<storage, read> b: array<{input}>;\n");
    }
    s += &format!("@group(0) @binding(3) var<storage, read_write> c: array<{output}>;\n\n");
    s += match dtype {
        FloatType::F32 => "",
        FloatType::Bf16 => BF16_CONVERSIONS,
        FloatType::F16 => F16_CONVERSIONS,
    };
    if sixteen {
        s += HALF_OF;
    }
    let a = if a_in_c { "c" } else { "a" };
    let b = if b_in_c { "c" } else { "b" };
    s += &format!(
        "fn load_a(e: u32) -> f32 {{ return {}; }}\n",
        read(dtype, a, "p.a_off + e")
    );
    s += &format!(
        "fn load_b(e: u32) -> f32 {{ return {}; }}\n",
        read(dtype, b, "p.b_off + e")
    );
    s += &format!(
        "fn load_c(e: u32) -> f32 {{ return {}; }}\n",
        read(dtype, "c", "p.c_off + e")
    );
    s += if sixteen { STORE_HALF } else { STORE_F32 };
    s += GEMM_MAIN;
    s
}

const GEMM_PRELUDE: &str = r"// GEMM of accel-graph: C = alpha * op(A) * op(B) + beta * C on row-major matrices,
// batches one after the other. Generated by backend-wgpu/src/gemm.rs.

struct Params {
    m: u32, n: u32, k: u32, batch: u32,
    // Nonzero: op(A) = A^T (A stored k x m); op(B) = B^T (B stored n x k).
    trans_a: u32, trans_b: u32,
    alpha: f32, beta: f32,
    // First element of each operand within the binding it is read from.
    a_off: u32, b_off: u32, c_off: u32, _pad: u32,
}

const TILE: u32 = 16u;

var<workgroup> tile_a: array<array<f32, 16>, 16>;
var<workgroup> tile_b: array<array<f32, 16>, 16>;

@group(0) @binding(0) var<uniform> p: Params;
";

/// The 16-bit element `index` of a buffer out of its word (elements are little-endian:
/// the even one is the low half).
const HALF_OF: &str = r"fn half_of(word: u32, index: u32) -> u32 {
    return (word >> ((index & 1u) * 16u)) & 0xffffu;
}

";

const BF16_CONVERSIONS: &str = r"fn to_f32(h: u32) -> f32 {
    return bitcast<f32>(h << 16u);
}

// Round to nearest, ties to even; NaN stays NaN (quiet).
fn from_f32(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return ((x >> 16u) | 0x40u) & 0xffffu;
    }
    let round_bit = 0x8000u;
    if ((x & round_bit) != 0u && (x & (3u * round_bit - 1u)) != 0u) {
        return ((x >> 16u) + 1u) & 0xffffu;
    }
    return x >> 16u;
}

";

const F16_CONVERSIONS: &str = r"// Exact for every f16, subnormals included (they are normal in f32).
fn to_f32(h: u32) -> f32 {
    let sign = (h & 0x8000u) << 16u;
    let exponent = (h >> 10u) & 0x1fu;
    let mantissa = h & 0x3ffu;
    if (exponent == 0u) {
        // Zero or subnormal: mantissa * 2^-24, exact.
        return bitcast<f32>(sign | bitcast<u32>(f32(mantissa) * 5.9604644775390625e-8));
    }
    if (exponent == 31u) {
        return bitcast<f32>(sign | 0x7f800000u | (mantissa << 13u));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mantissa << 13u));
}

// Round to nearest, ties to even, to subnormals and infinity too; NaN stays NaN (quiet).
fn from_f32(v: f32) -> u32 {
    let x = bitcast<u32>(v);
    let sign = (x >> 16u) & 0x8000u;
    let exponent = x & 0x7f800000u;
    let mantissa = x & 0x007fffffu;
    if (exponent == 0x7f800000u) {
        var quiet = 0u;
        if (mantissa != 0u) {
            quiet = 0x200u;
        }
        return sign | 0x7c00u | quiet | (mantissa >> 13u);
    }
    let half_exponent = i32(exponent >> 23u) - 112;
    if (half_exponent >= 31) {
        return sign | 0x7c00u;
    }
    if (half_exponent <= 0) {
        if (14 - half_exponent > 24) {
            return sign;
        }
        let full = mantissa | 0x00800000u;
        let shift = u32(14 - half_exponent);
        let round_bit = 1u << (shift - 1u);
        var bits = full >> shift;
        if ((full & round_bit) != 0u && (full & (3u * round_bit - 1u)) != 0u) {
            bits = bits + 1u;
        }
        return sign | bits;
    }
    let bits = sign | (u32(half_exponent) << 10u) | (mantissa >> 13u);
    let round_bit = 0x1000u;
    if ((mantissa & round_bit) != 0u && (mantissa & (3u * round_bit - 1u)) != 0u) {
        return bits + 1u;
    }
    return bits;
}

";

const STORE_F32: &str = r"fn store_c(e: u32, v: f32) {
    c[p.c_off + e] = v;
}
";

/// Replaces one half of a word: the other half may be another invocation's element, written
/// concurrently, so the half is cleared and set with atomics that leave the other bits alone.
const STORE_HALF: &str = r"fn store_c(e: u32, v: f32) {
    let index = p.c_off + e;
    let shift = (index & 1u) * 16u;
    atomicAnd(&c[index >> 1u], ~(0xffffu << shift));
    atomicOr(&c[index >> 1u], from_f32(v) << shift);
}
";

const GEMM_MAIN: &str = r"
@compute @workgroup_size(16, 16, 1)
fn gemm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>) {
    let batch = wid.z;
    let row = wid.y * TILE + lid.y;
    let col = wid.x * TILE + lid.x;
    let a_base = batch * p.m * p.k;
    let b_base = batch * p.k * p.n;
    var sum = 0.0;
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TILE) {
        // Each invocation loads op(A)[row][k0 + lid.x] and op(B)[k0 + lid.y][col].
        let ka = k0 + lid.x;
        var va = 0.0;
        if (row < p.m && ka < p.k) {
            var ia = row * p.k + ka;
            if (p.trans_a != 0u) {
                ia = ka * p.m + row;
            }
            va = load_a(a_base + ia);
        }
        tile_a[lid.y][lid.x] = va;
        let kb = k0 + lid.y;
        var vb = 0.0;
        if (kb < p.k && col < p.n) {
            var ib = kb * p.n + col;
            if (p.trans_b != 0u) {
                ib = col * p.k + kb;
            }
            vb = load_b(b_base + ib);
        }
        tile_b[lid.y][lid.x] = vb;
        workgroupBarrier();
        // Only the tile's real products, in order of k: the sum is the reference's.
        let count = min(TILE, p.k - k0);
        for (var q = 0u; q < count; q = q + 1u) {
            sum = sum + tile_a[lid.y][q] * tile_b[q][lid.x];
        }
        workgroupBarrier();
    }
    if (row < p.m && col < p.n) {
        let at = batch * p.m * p.n + row * p.n + col;
        var out = p.alpha * sum;
        // beta == 0: C is only written, whatever it holds (NaN included).
        if (p.beta != 0.0) {
            out = out + p.beta * load_c(at);
        }
        store_c(at, out);
    }
}
";

/// The unsupported-size error of a product.
fn too_large(spec: &Gemm, why: String) -> DriverError {
    DriverError::Api(GraphError::Unsupported {
        what: format!(
            "gemm {}x{}x{} batch {}: {why}",
            spec.m, spec.n, spec.k, spec.batch
        ),
    })
}

/// A size as the kernel's `u32`.
fn count(spec: &Gemm, what: &str, value: usize) -> DriverResult<u32> {
    u32::try_from(value).map_err(|_| too_large(spec, format!("{what} = {value} exceeds u32")))
}

/// The binding of some byte ranges of one block, from the adapter's storage offset alignment
/// at or below the first, to the word at or after the last.
struct Span {
    start: u64,
    end: u64,
}

impl Span {
    fn of(limits: &wgpu::Limits, ranges: &[&Bytes<'_, WgpuBlock>]) -> Span {
        let align = u64::from(limits.min_storage_buffer_offset_alignment.max(4));
        let first = ranges.iter().map(|r| r.offset as u64).min().unwrap_or(0);
        let end = ranges
            .iter()
            .map(|r| (r.offset + r.len) as u64)
            .max()
            .unwrap_or(first);
        Span {
            start: first / align * align,
            // Blocks are whole words, so the rounded end stays inside.
            end: end.next_multiple_of(4),
        }
    }

    fn size(&self) -> u64 {
        self.end - self.start
    }

    fn binding<'b>(&self, block: &'b WgpuBlock) -> wgpu::BindingResource<'b> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: block.buffer(),
            offset: self.start,
            size: wgpu::BufferSize::new(self.size()),
        })
    }

    /// The element at `offset` bytes, counted from the binding's start.
    fn element(&self, offset: usize, size: usize) -> u32 {
        ((offset as u64 - self.start) / size as u64) as u32
    }
}

impl Gpu {
    /// Resolves the product `spec` on operands of `dtype`: the command that runs it (a node
    /// that does nothing when `C` is empty). The operands' lengths were checked.
    pub(crate) fn resolve_gemm(
        &self,
        spec: &Gemm,
        dtype: FloatType,
        a: Bytes<'_, WgpuBlock>,
        b: Bytes<'_, WgpuBlock>,
        c: Bytes<'_, WgpuBlock>,
    ) -> DriverResult<Command> {
        if c.len == 0 {
            return Ok(Command::Nothing {
                kind: NodeKind::Kernel,
                label: "gemm (empty)",
            });
        }
        // The driver layer refused a `C` overlapping `A` or `B` (OverlappingOperands).
        let size = dtype.size();
        let in_c = |x: &Bytes<'_, WgpuBlock>| x.len > 0 && x.block.address() == c.block.address();
        let variant = Variant {
            dtype,
            a_in_c: in_c(&a),
            b_in_c: in_c(&b),
        };
        let mut c_ranges = vec![&c];
        c_ranges.extend([&a].into_iter().filter(|_| variant.a_in_c));
        c_ranges.extend([&b].into_iter().filter(|_| variant.b_in_c));
        let c_span = Span::of(&self.limits, &c_ranges);
        let own_span = |x: &Bytes<'_, WgpuBlock>| (x.len > 0).then(|| Span::of(&self.limits, &[x]));
        let a_span = own_span(&a).filter(|_| !variant.a_in_c);
        let b_span = own_span(&b).filter(|_| !variant.b_in_c);
        let max_binding = self.limits.max_storage_buffer_binding_size;
        for span in [Some(&c_span), a_span.as_ref(), b_span.as_ref()]
            .into_iter()
            .flatten()
        {
            if span.size() > max_binding {
                return Err(too_large(
                    spec,
                    format!(
                        "an operand's binding of {} bytes exceeds the adapter's {max_binding} \
                         bytes of storage per binding",
                        span.size()
                    ),
                ));
            }
        }
        let offset_in = |x: &Bytes<'_, WgpuBlock>, own: &Option<Span>, in_c: bool| {
            if in_c {
                c_span.element(x.offset, size)
            } else {
                own.as_ref().map_or(0, |s| s.element(x.offset, size))
            }
        };
        let groups = [
            spec.n.div_ceil(TILE as usize),
            spec.m.div_ceil(TILE as usize),
            spec.batch,
        ];
        let max_groups = self.limits.max_compute_workgroups_per_dimension as usize;
        if let Some(g) = groups.iter().find(|&&g| g > max_groups) {
            return Err(too_large(
                spec,
                format!(
                    "{g} workgroups along one dimension exceed the adapter's {max_groups} \
                     (tiles of {TILE} x {TILE}, one batch per workgroup layer)"
                ),
            ));
        }
        let params = Params {
            m: count(spec, "m", spec.m)?,
            n: count(spec, "n", spec.n)?,
            k: count(spec, "k", spec.k)?,
            batch: count(spec, "batch", spec.batch)?,
            trans_a: spec.transpose_a.into(),
            trans_b: spec.transpose_b.into(),
            alpha: spec.alpha,
            beta: spec.beta,
            a_off: offset_in(&a, &a_span, variant.a_in_c),
            b_off: offset_in(&b, &b_span, variant.b_in_c),
            c_off: c_span.element(c.offset, size),
            pad: 0,
        };
        let built = self.gemm.get(&self.device, variant)?;
        let uniform = self
            .device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("accel-graph gemm params"),
                contents: bytemuck::bytes_of(&params),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        // An empty A or B (k = 0) is never read; WebGPU still wants a binding.
        let read_only = |span: &Option<Span>, block| match span {
            Some(span) => span.binding(block),
            None => self.empty.read.as_entire_binding(),
        };
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: uniform.as_entire_binding(),
        }];
        if !variant.a_in_c {
            entries.push(wgpu::BindGroupEntry {
                binding: 1,
                resource: read_only(&a_span, a.block),
            });
        }
        if !variant.b_in_c {
            entries.push(wgpu::BindGroupEntry {
                binding: 2,
                resource: read_only(&b_span, b.block),
            });
        }
        entries.push(wgpu::BindGroupEntry {
            binding: 3,
            resource: c_span.binding(c.block),
        });
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("accel-graph gemm"),
            layout: &built.layout,
            entries: &entries,
        });
        let name = format!(
            "gemm_{dtype} {}x{}x{}{}{} batch={}",
            spec.m,
            spec.n,
            spec.k,
            if spec.transpose_a { " A^T" } else { "" },
            if spec.transpose_b { " B^T" } else { "" },
            spec.batch
        );
        // `groups` were checked against the adapter's limit, itself a `u32`.
        let groups = groups.map(|g| g as u32);
        Ok(Command::Dispatch(ResolvedDispatch::new(
            DispatchName::Named(Arc::from(name)),
            NodeKind::Kernel,
            built.pipeline.clone(),
            vec![(0, bind_group)],
            groups,
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_parses_and_validates() {
        for dtype in [FloatType::F32, FloatType::Bf16, FloatType::F16] {
            for (a_in_c, b_in_c) in [(false, false), (true, false), (false, true), (true, true)] {
                let variant = Variant {
                    dtype,
                    a_in_c,
                    b_in_c,
                };
                let source = wgsl(variant);
                let module = wgpu::naga::front::wgsl::parse_str(&source)
                    .unwrap_or_else(|e| panic!("{variant:?}: {}", e.emit_to_string(&source)));
                let mut validator = wgpu::naga::valid::Validator::new(
                    wgpu::naga::valid::ValidationFlags::all(),
                    wgpu::naga::valid::Capabilities::empty(),
                );
                if let Err(e) = validator.validate(&module) {
                    panic!("{variant:?}: {}", e.emit_to_string(&source));
                }
            }
        }
    }

    #[test]
    fn variants_index_their_slots_once() {
        let mut seen = [false; VARIANTS];
        for dtype in [FloatType::F32, FloatType::Bf16, FloatType::F16] {
            for a_in_c in [false, true] {
                for b_in_c in [false, true] {
                    let i = Variant {
                        dtype,
                        a_in_c,
                        b_in_c,
                    }
                    .index();
                    assert!(!seen[i]);
                    seen[i] = true;
                }
            }
        }
    }
}
