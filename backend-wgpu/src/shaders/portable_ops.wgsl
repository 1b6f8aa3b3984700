// Portable ops of accel-graph on f32 buffers. One invocation per element; the element index is
// spread over a 2-D grid of workgroups because one dimension holds at most 65535 workgroups.

struct Params {
    // Number of elements to touch.
    n: u32,
    // The scalar of the op (fill value, addend, factor, axpy's `a`).
    a: f32,
    // Always 0, but unknown to the shader compiler: see `rounded`.
    zero: u32,
    _pad: u32,
}

const WORKGROUP_SIZE: u32 = 256u;

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@group(0) @binding(2) var<storage, read> x: array<f32>;

// `value` rounded to f32 and opaque to the compiler: XOR with a run-time zero forces the bits to
// exist, so `y + rounded(a * x)` cannot be contracted into a fused multiply-add (WGSL allows
// contraction, and NVIDIA's compiler does it). One integer op per element buys results that
// equal host f32 arithmetic bit for bit.
fn rounded(value: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(value) ^ params.zero);
}

fn element(wid: vec3<u32>, lid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return (wid.y * groups.x + wid.x) * WORKGROUP_SIZE + lid.x;
}

@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(wid, lid, groups);
    if (i < params.n) {
        y[i] = params.a;
    }
}

@compute @workgroup_size(256)
fn add_scalar(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
              @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(wid, lid, groups);
    if (i < params.n) {
        y[i] = y[i] + params.a;
    }
}

@compute @workgroup_size(256)
fn scale(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
         @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(wid, lid, groups);
    if (i < params.n) {
        y[i] = y[i] * params.a;
    }
}

// y += a * x, the product rounded before the sum (no fused multiply-add).
@compute @workgroup_size(256)
fn axpy(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(wid, lid, groups);
    if (i < params.n) {
        let product = rounded(params.a * x[i]);
        y[i] = y[i] + product;
    }
}

// y += a * y, for axpy whose two operands are the same buffer: WebGPU forbids binding one
// buffer as read-only and read-write storage in the same dispatch.
@compute @workgroup_size(256)
fn axpy_self(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) groups: vec3<u32>) {
    let i = element(wid, lid, groups);
    if (i < params.n) {
        let product = rounded(params.a * y[i]);
        y[i] = y[i] + product;
    }
}
