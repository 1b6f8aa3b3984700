//! A race found: its two accesses, for the error and for the log users' tests read.

use accel_graph_api::{GraphError, RaceAccess};

/// One data race the sanitizer found (see [`crate::MockBackend::race_reports`]): the access
/// that came first, and the one that raced with it — the work that failed with
/// [`GraphError::DataRace`].
///
/// ```
/// use accel_graph_api::prelude::*;
/// use accel_graph_api::{AccessKind, AccessSource};
/// use accel_graph_mock::MockBackend;
///
/// let b = MockBackend::new();
/// let x = b.alloc_from(&[0.0; 4])?;
/// let (s1, s2) = (b.new_stream()?, b.new_stream()?);
/// b.synchronize()?; // the upload of x is ordered before both streams' work
/// {
///     let _on = b.use_stream(&s1)?;
///     b.fill(&x, 1.0)?;
/// }
/// let _on = b.use_stream(&s2)?;
/// let err = b.fill(&x, 2.0).unwrap_err(); // nothing orders it after s1's fill
/// let report = &b.race_reports()[0];
/// assert_eq!(report.first.label, format!("fill x={:#x}[4] value=1", x.device_address()));
/// assert_eq!((report.first.stream, report.second.stream), (1, 2));
/// assert_eq!(report.second.kind, AccessKind::Write);
/// assert_eq!(report.second.source, AccessSource::Eager);
/// assert!(matches!(err, GraphError::DataRace { .. }));
/// # Ok::<(), GraphError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RaceReport {
    /// The access that came first.
    pub first: RaceAccess,
    /// The access that raced with it.
    pub second: RaceAccess,
}

impl From<RaceReport> for GraphError {
    fn from(report: RaceReport) -> Self {
        GraphError::DataRace {
            first: Box::new(report.first),
            second: Box::new(report.second),
        }
    }
}
