//! Every decoder kernel can launch with programmatic dependent launch
//! ([`Kernels::overlapped`]), so each entry point must wait for the kernel before it before it
//! touches the step's buffers or returns: a kernel
//! that returned without waiting could finish before its predecessor, and the kernel after it
//! would read unfinished results on a GPU. A GPU cannot check this; the sources can be read.

use accel_graph_decode::model::kernels::Kernels;

/// The body of `kernel`'s entry point in its CUDA source, from its opening brace.
fn entry_body<'s>(source: &'s str, name: &str) -> &'s str {
    let at = source
        .find(&format!("{name}("))
        .and_then(|signature| source[..signature].rfind("__global__").map(|_| signature))
        .unwrap_or_else(|| panic!("{name}: no entry point in its CUDA source"));
    let open = source[at..]
        .find('{')
        .unwrap_or_else(|| panic!("{name}: the entry point has no body"));
    &source[at + open..]
}

fn waits_first<T: accel_graph_decode::DecodeElement>() {
    assert!(
        Kernels::get::<T>()
            .all()
            .iter()
            .all(|k| !k.is_programmatic()),
        "the in-order kernels launch in stream order"
    );
    let kernels = Kernels::overlapped::<T>();
    for kernel in kernels.all() {
        let name = kernel.name();
        assert!(kernel.is_programmatic(), "{name} is not marked");
        let source = kernel.cuda_source().expect("every kernel has CUDA C");
        let body = entry_body(source, name);
        // Where the body first waits (directly, or through the projections' lin_start, which
        // lin_run calls first), and where it could first leave.
        let wait = ["accel_graph_grid_wait();", "lin_start();", "lin_run<"]
            .iter()
            .filter_map(|w| body.find(w))
            .min()
            .unwrap_or_else(|| panic!("{name}: the entry point never waits"));
        if let Some(ret) = body.find("return") {
            assert!(wait < ret, "{name} may return before it waits");
        }
        // Nothing but declarations before the wait (shared memory, a projection's epilogue
        // made of the arguments): no load or store.
        for statement in body[1..wait].split(';') {
            let statement = statement.trim();
            assert!(
                statement.is_empty()
                    || statement.starts_with("__shared__")
                    || statement.starts_with("LinOut e = {")
                    || statement.starts_with("LinGateUp e = {"),
                "{name}: `{statement}` before the wait"
            );
        }
    }
    // The projections' helper waits in every thread, and reads nothing first.
    let common = kernels.one_row.linear.cuda_source().expect("CUDA C");
    let start = &common[common.find("void lin_start()").expect("lin_start")..];
    let start = &start[start.find('{').expect("its body")..start.find("\n}\n").expect("its end")];
    assert_eq!(
        start.split_whitespace().collect::<String>(),
        "{accel_graph_grid_wait();accel_graph_launch_dependents();"
    );
}

#[test]
fn every_kernel_waits_for_its_predecessor_before_touching_memory_f32() {
    waits_first::<f32>();
}

#[test]
fn every_kernel_waits_for_its_predecessor_before_touching_memory_bf16() {
    waits_first::<half::bf16>();
}
