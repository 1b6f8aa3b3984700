//! `CommId`: the unique id every rank of a communicator is built from.

use std::fmt;

use crate::{GraphError, Result};

/// Bytes of a [`CommId`]: NCCL's `ncclUniqueId`.
pub const COMM_ID_BYTES: usize = 128;

/// The unique id of one communicator: made once (by rank 0, or by a launcher), handed to every
/// rank, which joins the communicator with it. On CUDA it is NCCL's `ncclUniqueId` (it names
/// rank 0's bootstrap address); on the mock, a token unique in the process.
///
/// [`Communicator::new`](super::Communicator::new) hands it to the other ranks through the
/// communicator's [`Store`](super::Store) by itself; a launcher that made it ahead can pass it
/// in the environment ([`CommId::ENV`], as hexadecimal) instead.
///
/// ```
/// use accel_graph_api::collective::CommId;
/// let id = CommId::from_bytes(&[7u8; 128])?;
/// let text = id.to_hex();
/// assert_eq!(text.len(), 256);
/// assert_eq!(CommId::from_hex(&text)?, id);
/// assert!(CommId::from_hex("abc").is_err());
/// # Ok::<(), accel_graph_api::GraphError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CommId([u8; COMM_ID_BYTES]);

impl CommId {
    /// The environment variable a launcher may set to the id in hexadecimal
    /// (`ACCEL_GRAPH_COMM_ID`): see [`CommId::from_env`].
    pub const ENV: &'static str = "ACCEL_GRAPH_COMM_ID";

    /// The id of exactly [`COMM_ID_BYTES`] bytes ([`GraphError::ArgumentMismatch`] otherwise).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let array: [u8; COMM_ID_BYTES] = bytes.try_into().map_err(|_| {
            GraphError::ArgumentMismatch(format!(
                "a communicator id has {COMM_ID_BYTES} bytes, got {}",
                bytes.len()
            ))
        })?;
        Ok(CommId(array))
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8; COMM_ID_BYTES] {
        &self.0
    }

    /// The id as lower-case hexadecimal (256 characters), for an environment variable.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// An id from [`CommId::to_hex`]'s text (surrounding blanks ignored).
    pub fn from_hex(text: &str) -> Result<Self> {
        let text = text.trim();
        let bad = || {
            GraphError::ArgumentMismatch(format!(
                "a communicator id is {} hexadecimal digits, got {:?}",
                2 * COMM_ID_BYTES,
                text.chars().take(40).collect::<String>()
            ))
        };
        if text.len() != 2 * COMM_ID_BYTES || !text.is_ascii() {
            return Err(bad());
        }
        let bytes: Option<Vec<u8>> = (0..COMM_ID_BYTES)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok())
            .collect();
        Self::from_bytes(&bytes.ok_or_else(bad)?)
    }

    /// The id in [`CommId::ENV`], if set: `Ok(None)` when unset,
    /// [`GraphError::InvalidEnvironment`] when set to something that is not an id.
    ///
    /// ```
    /// use accel_graph_api::collective::CommId;
    /// // Unset in doc tests: the ranks then share an id through their store.
    /// assert_eq!(CommId::from_env()?, None);
    /// # Ok::<(), accel_graph_api::GraphError>(())
    /// ```
    pub fn from_env() -> Result<Option<Self>> {
        match std::env::var(Self::ENV) {
            Err(std::env::VarError::NotPresent) => Ok(None),
            Err(std::env::VarError::NotUnicode(value)) => Err(GraphError::InvalidEnvironment {
                name: Self::ENV,
                value: value.to_string_lossy().into_owned(),
            }),
            Ok(text) => {
                Self::from_hex(&text)
                    .map(Some)
                    .map_err(|_| GraphError::InvalidEnvironment {
                        name: Self::ENV,
                        value: text.chars().take(40).collect(),
                    })
            }
        }
    }
}

impl fmt::Debug for CommId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The first bytes tell ids apart in logs; all 128 would drown them.
        let head: String = self.0[..8].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "CommId({head}…)")
    }
}
