//! The WGSL skeleton every element-wise kernel shares, as macros: given a table of kernels
//! (in `ops.rs`), [`element_kernels!`] declares the `Kernel` enum and splices each row's
//! expression into the skeleton, building the whole module source at compile time.
//!
//! Each row becomes an element function `<name>_element(y, x, a) -> f32` returning the row's
//! expression, and an entry point `<name>` that applies it to every element (`x` reads the
//! second buffer in binary rows, is `0.0` in unary ones). A binary row also gets
//! `<name>_self`, reading `y` for `x`, for the op applied to one buffer twice: WebGPU forbids
//! binding one buffer as read-only and read-write storage in the same dispatch.

/// The workgroup size, as a literal so that it can be spliced into the WGSL text.
macro_rules! workgroup_size {
    () => {
        256
    };
}
pub(crate) use workgroup_size;

/// The WGSL every kernel shares: the parameter block, the bindings, the FMA guard and the
/// element index.
macro_rules! wgsl_prelude {
    () => {
        concat!(
            "// Portable ops of accel-graph on f32 buffers, generated from the table in\n",
            "// backend-wgpu/src/ops.rs. One invocation per element; the element index is\n",
            "// spread over a 2-D grid of workgroups because one dimension holds at most\n",
            "// 65535 workgroups.\n\n",
            "struct Params {\n",
            "    // Number of elements to touch.\n",
            "    n: u32,\n",
            "    // The scalar of the op (fill value, addend, factor, axpy's `a`).\n",
            "    a: f32,\n",
            "    // Always 0, but unknown to the shader compiler: see `rounded`.\n",
            "    zero: u32,\n",
            "    // First element of `y` and of `x` within their bindings (views of buffers).\n",
            "    y_off: u32,\n",
            "    x_off: u32,\n",
            "    _pad0: u32,\n",
            "    _pad1: u32,\n",
            "    _pad2: u32,\n",
            "}\n\n",
            "const WORKGROUP_SIZE: u32 = ",
            $crate::wgsl::workgroup_size!(),
            "u;\n\n",
            "@group(0) @binding(0) var<uniform> params: Params;\n",
            "@group(0) @binding(1) var<storage, read_write> ys: array<f32>;\n",
            "@group(0) @binding(2) var<storage, read> xs: array<f32>;\n\n",
            "// `value` rounded to f32 and opaque to the compiler: XOR with a run-time zero forces\n",
            "// the bits to exist, so `y + rounded(a * x)` cannot be contracted into a fused\n",
            "// multiply-add (WGSL allows contraction, and NVIDIA's compiler does it). One integer\n",
            "// op per element buys results that equal host f32 arithmetic bit for bit.\n",
            "fn rounded(value: f32) -> f32 {\n",
            "    return bitcast<f32>(bitcast<u32>(value) ^ params.zero);\n",
            "}\n\n",
            "fn element_index(wid: vec3<u32>, lid: vec3<u32>, groups: vec3<u32>) -> u32 {\n",
            "    return (wid.y * groups.x + wid.x) * WORKGROUP_SIZE + lid.x;\n",
            "}\n",
        )
    };
}
pub(crate) use wgsl_prelude;

/// The element function of one row: the row's expression of `y`, `x` and `a`.
macro_rules! wgsl_element {
    ($name:literal, $expr:literal) => {
        concat!(
            "\nfn ",
            $name,
            "_element(y: f32, x: f32, a: f32) -> f32 {\n    return ",
            $expr,
            ";\n}\n",
        )
    };
}
pub(crate) use wgsl_element;

/// One entry point: `ys[y_off + i] = <name>_element(ys[y_off + i], <x>, params.a)` for every
/// element `i < n`.
macro_rules! wgsl_entry {
    ($entry:expr, $name:literal, $x:literal) => {
        concat!(
            "\n@compute @workgroup_size(",
            $crate::wgsl::workgroup_size!(),
            ")\nfn ",
            $entry,
            "(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,\n",
            "        @builtin(num_workgroups) groups: vec3<u32>) {\n",
            "    let i = element_index(wid, lid, groups);\n",
            "    if (i < params.n) {\n",
            "        let y = params.y_off + i;\n",
            "        ys[y] = ",
            $name,
            "_element(ys[y], ",
            $x,
            ", params.a);\n",
            "    }\n",
            "}\n",
        )
    };
}
pub(crate) use wgsl_entry;

/// The WGSL of one row: its element function and entry points.
macro_rules! wgsl_kernel {
    (unary, $name:literal, $expr:literal) => {
        concat!(
            $crate::wgsl::wgsl_element!($name, $expr),
            $crate::wgsl::wgsl_entry!($name, $name, "0.0"),
        )
    };
    (binary, $name:literal, $expr:literal) => {
        concat!(
            $crate::wgsl::wgsl_element!($name, $expr),
            $crate::wgsl::wgsl_entry!($name, $name, "xs[params.x_off + i]"),
            $crate::wgsl::wgsl_entry!(concat!($name, "_self"), $name, "ys[params.x_off + i]"),
        )
    };
}
pub(crate) use wgsl_kernel;

/// The `<name>_self` entry point of a row (binary rows only).
macro_rules! self_entry {
    (unary, $name:literal) => {
        None
    };
    (binary, $name:literal) => {
        Some(concat!($name, "_self"))
    };
}
pub(crate) use self_entry;

/// Declares the element-wise kernels from their table: the `Kernel` enum (one variant per
/// row, in table order) and `PORTABLE_OPS_WGSL`, the module source of all of them.
///
/// A row is `Variant = "entry_point", unary|binary, "expression";`, the expression a WGSL
/// `f32` expression of `y` (the element written), `x` (the element read, binary rows), `a`
/// (the op's scalar) and `rounded(v)` (a product that must not be fused into the sum around
/// it).
macro_rules! element_kernels {
    ($($(#[$doc:meta])* $variant:ident = $name:literal, $arity:ident, $expr:literal;)*) => {
        /// An element-wise kernel of [`PORTABLE_OPS_WGSL`] (one table row).
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub(crate) enum Kernel {
            $($(#[$doc])* $variant,)*
        }

        impl Kernel {
            /// Every kernel, in table order (`kernel as usize` indexes it).
            pub(crate) const ALL: &[Kernel] = &[$(Kernel::$variant),*];

            /// The WGSL entry point, also the node label.
            pub(crate) fn name(self) -> &'static str {
                match self {
                    $(Kernel::$variant => $name,)*
                }
            }

            /// The entry point reading `y` for `x`, for kernels that read a second buffer.
            pub(crate) fn self_entry(self) -> Option<&'static str> {
                match self {
                    $(Kernel::$variant => $crate::wgsl::self_entry!($arity, $name),)*
                }
            }
        }

        /// WGSL source of the portable ops, for code that wants to build the same pipelines
        /// itself (the benchmark's hand-built baseline). One entry point per element-wise op,
        /// named after it (`fill`, `scale`, `axpy`, ...), and `<op>_self` for each op that
        /// reads a second buffer, applied to one buffer twice (`axpy_self`).
        ///
        /// Bindings: `@group(0) @binding(0)` a uniform
        /// `Params { n: u32, a: f32, zero: u32, y_off: u32, x_off: u32, _pad0..2: u32 }`
        /// (`zero` must be 0: it keeps `axpy`'s product from being fused into an FMA;
        /// `y_off`/`x_off` are the first elements touched in each binding), `@binding(1)`
        /// the read-write `y`, `@binding(2)` the read-only `x` (ops that read a second
        /// buffer; the `_self` entry points read `x` from `y`'s binding at `x_off`). Workgroups of
        /// [`WORKGROUP_SIZE`](crate::WORKGROUP_SIZE) invocations; see
        /// [`dispatch_size`](crate::dispatch_size) for the grid.
        pub const PORTABLE_OPS_WGSL: &str = concat!(
            $crate::wgsl::wgsl_prelude!(),
            $($crate::wgsl::wgsl_kernel!($arity, $name, $expr),)*
        );
    };
}
pub(crate) use element_kernels;
