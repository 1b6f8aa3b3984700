//! What the PyTorch ports share: PyTorch's tensor idioms spelled with the portable ops, the
//! test class's ambient stream, `wait_stream`, host-side sums and the stand-in for
//! `torch.cuda._sleep`.
//!
//! Every helper that may run inside a capture returns [`GraphError`], so capture bodies can
//! use `?`; the ones that only run outside return the cases' `String` failures.

use accel_graph_api::{Backend, BackendKind, DeviceBuffer, GraphError, Result, StreamGuard};

use crate::check::{Ctx, ensure, on_stream, read};

/// PyTorch's `TestCuda` runs every test inside `CudaNonDefaultStream()`: the current stream
/// is a fresh side stream, not the default one. The ports do the same, so "the ambient
/// stream" of a test is a stream of its own; keep the guard until the case ends.
pub(super) fn ambient<B: Backend>(b: &B) -> Result<(B::Stream, StreamGuard<B>), String> {
    let stream = b.new_stream().ctx("new_stream (the ambient stream)")?;
    let guard = on_stream(b, &stream)?;
    Ok((stream, guard))
}

/// `waiter.wait_stream(waited)`: an event recorded on `waited`, waited on by `waiter`. Our
/// events record on the current stream, so `waited` is made current for the record (PyTorch
/// records on the stream given). Inside a capture this forks `waiter` into it, or joins it.
pub(super) fn wait_stream<B: Backend>(b: &B, waiter: &B::Stream, waited: &B::Stream) -> Result<()> {
    let event = b.new_event()?;
    {
        let _waited = b.use_stream(waited)?;
        b.record_event(&event)?;
    }
    let _waiter = b.use_stream(waiter)?;
    b.wait_event(&event)
}

/// `torch.full((len,), value)` (also `ones`, `zeros`): a new buffer, filled on the current
/// stream; inside a capture it comes from the graph's pool and the fill is captured.
pub(super) fn full<B: Backend>(b: &B, len: usize, value: f32) -> Result<B::Buffer<f32>> {
    let x = b.alloc(len)?;
    b.fill(&x, value)?;
    Ok(x)
}

/// `t.clone()`: a new buffer and a device-to-device copy.
pub(super) fn clone_of<B: Backend>(b: &B, t: &B::Buffer<f32>) -> Result<B::Buffer<f32>> {
    let x = b.alloc(t.len())?;
    b.copy(&x, t)?;
    Ok(x)
}

/// `t + c`, out of place: a new buffer holding `t`, then `add_scalar`.
pub(super) fn plus<B: Backend>(b: &B, t: &B::Buffer<f32>, c: f32) -> Result<B::Buffer<f32>> {
    let x = clone_of(b, t)?;
    b.add_scalar(&x, c)?;
    Ok(x)
}

/// `x + y`, out of place: a new buffer holding `x`, then `axpy` with factor 1 (the portable
/// op set has no element-wise add of two buffers; `x + 1 * y` is exactly `x + y`).
pub(super) fn add<B: Backend>(
    b: &B,
    x: &B::Buffer<f32>,
    y: &B::Buffer<f32>,
) -> Result<B::Buffer<f32>> {
    let out = clone_of(b, x)?;
    b.axpy(&out, 1.0, y)?;
    Ok(out)
}

/// PyTorch's `func_with_temps(t, val)`: `x = t.clone() + val; y = t.clone() + val; return
/// x + y` — two clones, two out-of-place adds and one sum, the temporaries dropped where
/// Python drops them. The address of every buffer it allocates is pushed to `allocated`.
pub(super) fn func_with_temps<B: Backend>(
    b: &B,
    t: &B::Buffer<f32>,
    val: f32,
    allocated: &mut Vec<u64>,
) -> Result<B::Buffer<f32>> {
    let mut temp_plus = || -> Result<B::Buffer<f32>> {
        let clone = clone_of(b, t)?;
        let out = plus(b, &clone, val)?;
        allocated.extend([clone.device_address(), out.device_address()]);
        Ok(out)
    };
    let x = temp_plus()?;
    let y = temp_plus()?;
    let out = add(b, &x, &y)?;
    allocated.push(out.device_address());
    Ok(out)
}

/// `buf.sum().item()`: waits for the device, reads `buf` back and sums on the host, in `f64`
/// so that the sums of these tests (integers below 2^53) are exact.
pub(super) fn sum<B: Backend>(b: &B, buf: &B::Buffer<f32>) -> Result<f64, String> {
    Ok(read(b, buf)?.iter().map(|&v| f64::from(v)).sum())
}

/// `assertEqual(buf.sum().item(), expected)`.
pub(super) fn expect_sum<B: Backend>(
    b: &B,
    buf: &B::Buffer<f32>,
    expected: f64,
    what: &str,
) -> Result<(), String> {
    let got = sum(b, buf)?;
    ensure!(got == expected, "{what}: sum is {got}, expected {expected}");
    Ok(())
}

/// Elements of the buffer the stand-in for `torch.cuda._sleep` works on (16 MiB).
const SPIN_LEN: usize = 1 << 22;

/// The stand-in for `torch.cuda._sleep(cycles)`: there is no portable spin kernel, so a chain
/// of `add_scalar` over a 16 MiB buffer keeps the current stream busy for a while (each op
/// reads and writes the whole buffer: about 10 µs on an H100, so 128 ops last over a
/// millisecond, far longer than the host takes to issue what the tests issue next).
///
/// The mock runs stream work synchronously on the calling thread: no amount of work keeps its
/// stream busy once the call returns, so there the chain is one op on one element, which
/// checks the same calls without spending time.
pub(super) struct Spin<B: Backend> {
    scratch: B::Buffer<f32>,
    ops: usize,
}

impl<B: Backend> Spin<B> {
    /// A spin of `ops` ops (fewer on the mock, see above); its scratch buffer is allocated and
    /// filled now, on the current stream, outside any capture.
    pub(super) fn new(b: &B, ops: usize) -> Result<Self, String> {
        let synchronous = b.kind() == BackendKind::Mock;
        let (len, ops) = if synchronous { (1, 1) } else { (SPIN_LEN, ops) };
        let scratch = full(b, len, 0.0).ctx("alloc + fill of the spin buffer")?;
        Ok(Spin { scratch, ops })
    }

    /// Issues the chain on the current stream.
    pub(super) fn run(&self, b: &B) -> Result<()> {
        for _ in 0..self.ops {
            b.add_scalar(&self.scratch, 1.0)?;
        }
        Ok(())
    }
}

/// Expects `result` to have failed with an error whose message contains `text` (PyTorch's
/// `assertRaisesRegex`); returns the error.
pub(super) fn expect_message<T>(
    result: Result<T>,
    text: &str,
    what: &str,
) -> Result<GraphError, String> {
    match result {
        Ok(_) => Err(format!(
            "{what}: expected an error containing {text:?}, got Ok"
        )),
        Err(e) if e.to_string().contains(text) => Ok(e),
        Err(e) => Err(format!(
            "{what}: expected an error containing {text:?}, got {e:?}: {e}"
        )),
    }
}
