//! `DriverError`: how a driver reports a failed call.

use std::{borrow::Cow, fmt};

use accel_graph_api::{
    GraphError,
    backend_kit::{EmulatedCudaError, ErrorClass},
};

/// A failed driver call: the driver's own code and name, with the [`ErrorClass`] the driver
/// layer maps it by, or an API error the driver already knows to be one (the mock's sanitizer,
/// an injected fault).
#[derive(Debug)]
pub enum DriverError {
    /// A failure with the driver's code.
    Code {
        /// What kind of failure it is.
        class: ErrorClass,
        /// The driver's numeric code.
        code: i64,
        /// The driver's symbolic name (`CUDA_ERROR_OUT_OF_MEMORY`, `hipErrorInvalidValue`).
        name: Cow<'static, str>,
        /// The driver's description, and what was called.
        message: String,
    },
    /// A failure that is an API error as it stands.
    Api(GraphError),
}

/// The result of a driver call.
pub type DriverResult<T> = Result<T, DriverError>;

impl DriverError {
    /// A failure with the driver's code, name and message.
    pub fn code(
        class: ErrorClass,
        code: i64,
        name: impl Into<Cow<'static, str>>,
        message: impl Into<String>,
    ) -> Self {
        DriverError::Code {
            class,
            code,
            name: name.into(),
            message: message.into(),
        }
    }

    /// The CUDA error a software driver emulates.
    pub fn emulated(error: EmulatedCudaError, message: impl Into<String>) -> Self {
        DriverError::code(error.class(), error.code(), error.name(), message)
    }

    /// The failure's class (`Other` for API errors).
    pub fn class(&self) -> ErrorClass {
        match self {
            DriverError::Code { class, .. } => *class,
            DriverError::Api(_) => ErrorClass::Other,
        }
    }
}

impl From<GraphError> for DriverError {
    fn from(error: GraphError) -> Self {
        DriverError::Api(error)
    }
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Code {
                code,
                name,
                message,
                ..
            } => write!(f, "{name} ({code}): {message}"),
            DriverError::Api(e) => e.fmt(f),
        }
    }
}
