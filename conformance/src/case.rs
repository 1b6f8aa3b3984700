//! `Case`: one named, self-checking piece of the specification.

use std::sync::Arc;

use accel_graph_api::{Backend, Capabilities};

use crate::Target;

/// What a case needs from the backend: `Ok(())` to run it, `Err(reason)` to skip it with the
/// reason printed (for example `"backend has no host callbacks"`).
pub type Requirement = fn(&Capabilities) -> Result<(), String>;

/// What a case's body returns: `Err` carries the failure message.
pub type CaseResult = Result<(), String>;

/// The body of a case.
type Body<B> = Arc<dyn Fn(&Target<B>) -> CaseResult + Send + Sync>;

/// One case of the suite: a named check of one point of the specification.
///
/// The body returns `Ok(())` when the backend behaves as specified and `Err(message)` saying
/// what differed otherwise. A case cleans up after itself: no stream left capturing, every
/// buffer and graph it made dropped, the thread's current stream restored — the harness checks
/// the last two after every case ([`crate::run_case`]).
///
/// ```
/// use accel_graph_api::{Backend, PortableOps};
/// use accel_graph_conformance::{Case, Outcome, Target, requirements, run_case};
/// use accel_graph_mock::MockBackend;
///
/// let body = |t: &Target<MockBackend>| {
///     let x = t.alloc(4).map_err(|e| e.to_string())?;
///     t.fill(&x, 2.0).map_err(|e| e.to_string())?;
///     let data = t.download(&x).map_err(|e| e.to_string())?;
///     if data == [2.0; 4] { Ok(()) } else { Err(format!("got {data:?}")) }
/// };
/// let case = Case::new("9.99 fill writes every element", "examples", requirements::none, body);
/// let outcome = run_case(&Target::single(MockBackend::new()), &case).outcome;
/// assert_eq!(outcome, Outcome::Passed);
/// ```
pub struct Case<B: Backend> {
    /// Stable, unique name, starting with the number of the rule it checks (`"5.06a ..."`;
    /// docs/SEMANTICS.md says what each number means).
    pub name: &'static str,
    /// The group it belongs to (`"5.05 misuse"`, `"7 bucketed cache"`, ...).
    pub section: &'static str,
    /// Checks the backend's capabilities; an `Err` skips the case with that reason.
    pub requires: Requirement,
    /// The case opens another instance of the device ([`Target::another_instance`]): it is
    /// skipped on a target that cannot.
    pub needs_another_instance: bool,
    body: Body<B>,
}

impl<B: Backend> Case<B> {
    /// A case named `name` in `section`, run when `requires` holds.
    pub fn new(
        name: &'static str,
        section: &'static str,
        requires: Requirement,
        body: impl Fn(&Target<B>) -> CaseResult + Send + Sync + 'static,
    ) -> Self {
        Case {
            name,
            section,
            requires,
            needs_another_instance: false,
            body: Arc::new(body),
        }
    }

    /// The same case, marked as opening another instance of the device.
    pub fn needing_another_instance(mut self) -> Self {
        self.needs_another_instance = true;
        self
    }

    /// Why the case must be skipped on a backend with `caps`, if it must.
    pub fn skip_reason(&self, caps: &Capabilities) -> Option<String> {
        (self.requires)(caps).err()
    }

    /// Why the case must be skipped on `target`, if it must: a missing capability, or no way to
    /// open the other instance the case needs.
    pub fn skip_reason_on(&self, target: &Target<B>) -> Option<String> {
        self.skip_reason(&target.capabilities()).or_else(|| {
            (self.needs_another_instance && !target.can_open_another()).then(|| {
                "the case opens a second instance of the device, and the suite was given a \
                 single instance (give it a factory: conformance_main! or run_report_with)"
                    .to_owned()
            })
        })
    }

    /// Runs the body on `target` as is: no skip check, no leak check, panics propagate (see
    /// [`crate::run_case`] for all three).
    pub fn run(&self, target: &Target<B>) -> CaseResult {
        (self.body)(target)
    }
}

impl<B: Backend> Clone for Case<B> {
    fn clone(&self) -> Self {
        Case {
            name: self.name,
            section: self.section,
            requires: self.requires,
            needs_another_instance: self.needs_another_instance,
            body: Arc::clone(&self.body),
        }
    }
}

impl<B: Backend> std::fmt::Debug for Case<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("section", &self.section)
            .field("needs_another_instance", &self.needs_another_instance)
            .finish()
    }
}

/// The requirements cases use, each naming the missing capability in its skip reason.
pub mod requirements {
    use accel_graph_api::Capabilities;

    /// Every backend can run the case.
    pub fn none(_: &Capabilities) -> Result<(), String> {
        Ok(())
    }

    /// Needs `capabilities().multi_stream_capture` (fork/join through events).
    pub fn multi_stream_capture(caps: &Capabilities) -> Result<(), String> {
        caps.multi_stream_capture.then_some(()).ok_or_else(|| {
            "backend has no multi-stream capture (capabilities().multi_stream_capture is false)"
                .to_owned()
        })
    }

    /// Needs `capabilities().host_callbacks`.
    pub fn host_callbacks(caps: &Capabilities) -> Result<(), String> {
        caps.host_callbacks
            .then_some(())
            .ok_or_else(|| "backend has no host callbacks".to_owned())
    }

    /// Needs both host callbacks and multi-stream capture.
    pub fn host_callbacks_and_multi_stream_capture(caps: &Capabilities) -> Result<(), String> {
        host_callbacks(caps).and_then(|()| multi_stream_capture(caps))
    }

    /// Needs a default stream that refuses capture.
    pub fn uncapturable_default_stream(caps: &Capabilities) -> Result<(), String> {
        caps.uncapturable_default_stream
            .then_some(())
            .ok_or_else(|| {
                "backend's default stream can be captured \
             (capabilities().uncapturable_default_stream is false)"
                    .to_owned()
            })
    }

    /// Needs capture error modes to be enforced.
    pub fn capture_modes_enforced(caps: &Capabilities) -> Result<(), String> {
        caps.capture_modes_enforced.then_some(()).ok_or_else(|| {
            "backend does not enforce capture error modes \
             (capabilities().capture_modes_enforced is false)"
                .to_owned()
        })
    }

    /// Needs graph updates (`capabilities().graph_update`).
    pub fn graph_update(caps: &Capabilities) -> Result<(), String> {
        caps.graph_update.then_some(()).ok_or_else(|| {
            "backend cannot update graphs (capabilities().graph_update is false)".to_owned()
        })
    }

    /// Needs child-graph nodes (`capabilities().child_graphs`).
    pub fn child_graphs(caps: &Capabilities) -> Result<(), String> {
        caps.child_graphs.then_some(()).ok_or_else(|| {
            "backend has no child-graph nodes (capabilities().child_graphs is false)".to_owned()
        })
    }

    /// Needs `if_then` and `while_loop` nodes (`capabilities().conditional_nodes`).
    pub fn conditional_nodes(caps: &Capabilities) -> Result<(), String> {
        caps.conditional_nodes.then_some(()).ok_or_else(|| {
            "backend has no conditional nodes (capabilities().conditional_nodes is false)"
                .to_owned()
        })
    }

    /// Needs `if_else` nodes (`capabilities().conditional_if_else`) and the other conditional
    /// nodes.
    pub fn conditional_if_else(caps: &Capabilities) -> Result<(), String> {
        conditional_nodes(caps)?;
        caps.conditional_if_else.then_some(()).ok_or_else(|| {
            "backend has no if_else nodes (capabilities().conditional_if_else is false)".to_owned()
        })
    }

    /// Runs only where conditional nodes are missing: the case checks how they are refused.
    pub fn no_conditional_nodes(caps: &Capabilities) -> Result<(), String> {
        if caps.conditional_nodes {
            Err("backend has conditional nodes: there is no refusal to check".to_owned())
        } else {
            Ok(())
        }
    }

    /// Needs events that measure time (`elapsed_time`), also across a replayed graph.
    pub fn event_timing(caps: &Capabilities) -> Result<(), String> {
        caps.event_timing.then_some(()).ok_or_else(|| {
            "backend's events cannot measure time (capabilities().event_timing is false)".to_owned()
        })
    }
}
