//! `View`: a contiguous sub-range of a device buffer, what ops, kernels and copies take.

use std::ops::{Bound, RangeBounds};

use crate::{DeviceBuffer, GraphError, Result};

/// Elements `offset .. offset + len` of a buffer. Every call that takes a buffer takes a view
/// (`&buffer` converts to the whole buffer), so work can address part of a buffer; a captured
/// op on a view keeps the whole buffer's memory alive, as one on the buffer does.
///
/// ```
/// use accel_graph_api::prelude::*;
/// let backend = accel_graph_mock::MockBackend::new();
/// let x = backend.alloc_from(&[0.0f32; 6])?;
/// backend.fill(x.view(2..4)?, 1.0)?;          // ops take views ...
/// backend.add_scalar(&x, 1.0)?;               // ... and whole buffers
/// assert_eq!(backend.download(&x)?, vec![1.0, 1.0, 2.0, 2.0, 1.0, 1.0]);
/// assert_eq!(backend.download(x.view(4..)?)?, vec![1.0, 1.0]);
/// assert!(matches!(x.view(5..9), Err(GraphError::ViewOutOfRange { .. })));
/// # Ok::<(), GraphError>(())
/// ```
#[derive(Debug)]
pub struct View<'a, B: ?Sized> {
    buffer: &'a B,
    offset: usize,
    len: usize,
}

impl<B: ?Sized> Clone for View<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: ?Sized> Copy for View<'_, B> {}

/// Resolves `range` against `len` elements: `Err` unless `start <= end <= len`.
fn resolve(range: impl RangeBounds<usize>, len: usize) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => Some(s),
        Bound::Excluded(&s) => s.checked_add(1),
        Bound::Unbounded => Some(0),
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.checked_add(1),
        Bound::Excluded(&e) => Some(e),
        Bound::Unbounded => Some(len),
    };
    match (start, end) {
        (Some(start), Some(end)) if start <= end && end <= len => Ok((start, end)),
        _ => Err(GraphError::ViewOutOfRange {
            start: start.unwrap_or(usize::MAX),
            end: end.unwrap_or(usize::MAX),
            len,
        }),
    }
}

impl<'a, B: DeviceBuffer> View<'a, B> {
    /// The whole of `buffer`.
    pub fn whole(buffer: &'a B) -> Self {
        View {
            buffer,
            offset: 0,
            len: buffer.len(),
        }
    }

    /// Elements `range` of `buffer`; [`GraphError::ViewOutOfRange`] past its end.
    pub fn new(buffer: &'a B, range: impl RangeBounds<usize>) -> Result<Self> {
        let (start, end) = resolve(range, buffer.len())?;
        Ok(View {
            buffer,
            offset: start,
            len: end - start,
        })
    }

    /// Elements `range` of this view (relative to its start).
    pub fn view(&self, range: impl RangeBounds<usize>) -> Result<Self> {
        let (start, end) = resolve(range, self.len)?;
        Ok(View {
            buffer: self.buffer,
            offset: self.offset + start,
            len: end - start,
        })
    }

    /// The buffer viewed.
    pub fn buffer(&self) -> &'a B {
        self.buffer
    }

    /// The first element's index in the buffer.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the view has no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first element's byte offset in the buffer.
    pub fn byte_offset(&self) -> usize {
        self.offset * std::mem::size_of::<B::Element>()
    }

    /// Bytes viewed.
    pub fn num_bytes(&self) -> usize {
        self.len * std::mem::size_of::<B::Element>()
    }

    /// True when the view covers its whole buffer.
    pub fn is_whole(&self) -> bool {
        self.offset == 0 && self.len == self.buffer.len()
    }

    /// The device address of the first element.
    pub fn device_address(&self) -> u64 {
        self.buffer.device_address() + self.byte_offset() as u64
    }

    /// True when both views are the same elements of the same memory (the identity that
    /// decides whether a copy can be skipped).
    pub fn same_memory(&self, other: &View<'_, B>) -> bool {
        self.buffer.same_memory(other.buffer)
            && self.offset == other.offset
            && self.len == other.len
    }

    /// True when the two views share at least one byte of the same memory (an empty view
    /// shares none).
    pub fn overlaps(&self, other: &View<'_, B>) -> bool {
        let (a, b) = (self.byte_offset(), other.byte_offset());
        self.buffer.same_memory(other.buffer)
            && !self.is_empty()
            && !other.is_empty()
            && a < b + other.num_bytes()
            && b < a + self.num_bytes()
    }
}

impl<'a, B: DeviceBuffer> From<&'a B> for View<'a, B> {
    fn from(buffer: &'a B) -> Self {
        View::whole(buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_resolve_or_are_refused() {
        assert_eq!(resolve(.., 5).ok(), Some((0, 5)));
        assert_eq!(resolve(1..=2, 5).ok(), Some((1, 3)));
        assert_eq!(resolve(5.., 5).ok(), Some((5, 5)));
        assert!(resolve(4..6, 5).is_err());
        let (start, end) = (3, 2);
        assert!(resolve(start..end, 5).is_err());
        assert!(resolve(..=usize::MAX, 5).is_err());
    }
}
