//! The sanitizer: replay touching memory freed back to the device since capture is an error.

use accel_graph_api::{AcceleratorGraph, Backend, GraphError, GraphOptions};
use accel_graph_mock::MockBackend;

#[test]
fn dropped_plain_buffer_is_dangling() {
    let b = MockBackend::new();
    let x = b.alloc_from(&[0.0; 4]).unwrap();
    let y = b.alloc_from(&[0.0; 4]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || -> accel_graph_api::Result<()> {
        b.add_scalar(&x, 1.0)?;
        b.copy(&y, &x)
    })
    .unwrap()
    .unwrap();
    g.replay().unwrap();
    let y_addr = y.device_address();
    drop(y);
    match g.replay() {
        Err(GraphError::DanglingBuffer {
            address,
            node,
            label,
        }) => {
            assert_eq!(address, y_addr);
            assert_eq!(node, 1);
            assert!(label.contains("copy"), "{label}");
        }
        other => panic!("expected DanglingBuffer, got {other:?}"),
    }
    // Nothing ran: x saw exactly one replay.
    assert_eq!(b.download(&x).unwrap(), vec![1.0; 4]);
}

#[test]
fn memory_owned_by_a_held_pool_is_not_dangling_but_a_released_pool_is() {
    let b = MockBackend::new();
    let s = b.new_stream().unwrap();
    // g1 allocates `t` from its private pool during capture.
    let mut g1 = b.graph(GraphOptions::new()).unwrap();
    let t = b
        .capture_on(&s, &mut g1, || -> accel_graph_api::Result<_> {
            let t = b.alloc(4)?;
            b.fill(&t, 2.0)?;
            Ok(t)
        })
        .unwrap()
        .unwrap();
    // g2 uses `t` (memory of g1's pool).
    let mut g2 = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g2, || b.add_scalar(&t, 1.0))
        .unwrap()
        .unwrap();
    drop(t); // back to g1's pool, which g1 still holds
    g2.replay().unwrap();
    g1.reset(); // the pool has no holder and no buffer: returned to the device
    assert!(matches!(
        g2.replay(),
        Err(GraphError::DanglingBuffer { .. })
    ));
}

#[test]
fn graph_own_pool_temporaries_stay_valid() {
    let b = MockBackend::new();
    let out = b.alloc_from(&[0.0; 2]).unwrap();
    let s = b.new_stream().unwrap();
    let mut g = b.graph(GraphOptions::new()).unwrap();
    b.capture_on(&s, &mut g, || -> accel_graph_api::Result<()> {
        let tmp = b.alloc(2)?;
        b.fill(&tmp, 3.0)?;
        b.axpy(&out, 2.0, &tmp)
        // tmp dropped here: back to the graph's pool, still reserved
    })
    .unwrap()
    .unwrap();
    g.replay().unwrap();
    g.replay().unwrap();
    assert_eq!(b.download(&out).unwrap(), vec![12.0; 2]);
}
