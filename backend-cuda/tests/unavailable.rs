//! Without a CUDA driver (CI, most laptops) the backend reports itself unavailable with the
//! loader's text — it never panics. With a driver the constructor works or names the reason.

use accel_graph_api::GraphError;
use accel_graph_cuda::CudaBackend;

fn driver_library_present() -> bool {
    // SAFETY: only tries to load the library, as the backend does.
    unsafe { accel_graph_cuda::cudarc::driver::sys::is_culib_present() }
}

#[test]
fn new_reports_backend_unavailable_without_a_driver() {
    let present = driver_library_present();
    match CudaBackend::new(0) {
        Err(GraphError::BackendUnavailable { backend, reason }) => {
            assert_eq!(backend, "cuda");
            if !present {
                assert!(
                    reason.contains("CUDA driver library could not be loaded"),
                    "reason should carry the loader's text: {reason}"
                );
            }
            println!("CudaBackend::new(0): unavailable: {reason}");
        }
        Ok(backend) => {
            assert!(
                present,
                "a backend opened although libcuda cannot be loaded"
            );
            println!("CudaBackend::new(0): opened {backend:?}");
        }
        Err(other) => panic!("expected BackendUnavailable or a backend, got {other:?}"),
    }
}

#[test]
fn new_can_be_called_again_after_failing() {
    // cudarc's loader must never have been reached (it would panic on the second call too).
    let first = CudaBackend::new(0).map(|_| ()).map_err(|e| e.to_string());
    let second = CudaBackend::new(0).map(|_| ()).map_err(|e| e.to_string());
    assert_eq!(first.is_ok(), second.is_ok(), "{first:?} vs {second:?}");
}
