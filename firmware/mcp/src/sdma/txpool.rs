//! The sending streams' pool, which notes each stream handed out for
//! writing (the timers' deadline and views are worked out again).

use super::*;

/// The sending streams' pool. It notes each stream handed out for
/// writing (`IndexMut`, `alloc`, `free`): the active streams' deadline is
/// worked out again (`dl_stale`, also set when the active list changes:
/// `list_changed`), and in host builds that stream's timer view is taken
/// again.
///
/// (`repr(C)`: the flags first, the streams last.)
#[repr(C)]
pub(crate) struct TxPool {
    pub(super) dl_stale: bool,
    /// A stream was handed out for writing (`IndexMut`) since
    /// `Sdma::settle_views` last looked: its view may have changed.
    pub(super) touched: bool,
    /// A stream or the timer list was written, or the machine moved,
    /// since what it waits for was last settled (`Sdma::fill`).
    pub(super) unsettled: bool,
    #[cfg(not(target_os = "none"))]
    pub(super) changed: [u64; MAX_STREAMS.div_ceil(64)],
    pub(super) pool: Pool<TxStream, MAX_STREAMS>,
}

impl TxPool {
    pub(super) const fn new() -> TxPool {
        TxPool {
            pool: Pool::new(TxStream::EMPTY),
            #[cfg(not(target_os = "none"))]
            changed: [u64::MAX; MAX_STREAMS.div_ceil(64)],
            dl_stale: true,
            touched: false,
            unsettled: true,
        }
    }

    /// Stream `i` was handed out for writing: its view is taken again
    /// (`Sdma::settle_views`, `Sdma::timer_view`).
    #[inline]
    pub(super) fn note(&mut self, _i: TxId) {
        #[cfg(not(target_os = "none"))]
        if let Some(w) = self.changed.get_mut(_i.index() / 64) {
            *w |= 1 << (_i.index() % 64);
        }
        self.touched = true;
        self.unsettled = true;
    }

    /// Stream `i` was set up or let go of: its view is taken again, and
    /// the deadline too (the liveness of a stream on the list counts).
    #[inline]
    pub(super) fn note_live(&mut self, i: TxId) {
        self.note(i);
        self.dl_stale = true;
    }

    /// The active list (`Sdma::active_tx`) gained or lost a stream.
    #[inline]
    pub(super) fn list_changed(&mut self) {
        self.dl_stale = true;
        self.unsettled = true;
    }

    /// Did stream `i` change since the last call for it?
    #[cfg(not(target_os = "none"))]
    #[inline]
    pub(super) fn take_changed(&mut self, i: TxId) -> bool {
        match self.changed.get_mut(i.index() / 64) {
            Some(w) => {
                let bit = 1 << (i.index() % 64);
                let was = *w & bit != 0;
                *w &= !bit;
                was
            }
            None => true,
        }
    }

    pub(super) fn alloc(&mut self, v: TxStream) -> Option<TxId> {
        let i = self.pool.alloc(v)?;
        self.note_live(i);
        Some(i)
    }

    pub(super) fn free(&mut self, i: TxId) {
        self.note_live(i);
        self.pool.free(i)
    }

    pub(crate) fn is_live(&self, i: TxId) -> bool {
        self.pool.is_live(i)
    }

    pub(super) fn available(&self) -> usize {
        self.pool.available()
    }

    pub(crate) fn live_indices(&self) -> impl Iterator<Item = TxId> + '_ {
        self.pool.live_indices()
    }
}

impl core::ops::Index<TxId> for TxPool {
    type Output = TxStream;
    #[inline]
    fn index(&self, i: TxId) -> &TxStream {
        &self.pool[i]
    }
}

impl core::ops::IndexMut<TxId> for TxPool {
    #[inline]
    fn index_mut(&mut self, i: TxId) -> &mut TxStream {
        self.note(i);
        &mut self.pool[i]
    }
}
