//! A fixed-capacity pool of records addressed by u16 index: the MCP's only
//! allocator (no heap). `new` is const so the whole MCP can live in a
//! static on the bare-metal target.

pub const NIL: u16 = u16::MAX;

pub struct Pool<T: Copy, const N: usize> {
    items: [T; N],
    used: [bool; N],
    /// Indices below this have been handed out at least once.
    high: u16,
    /// Where the search for a free record starts: the lowest index freed
    /// since the last allocation, or `high` (no free list: it would cost
    /// two bytes a record, and the image has no room to spare).
    hint: u16,
    live: u16,
}

impl<T: Copy, const N: usize> Pool<T, N> {
    pub const fn new(empty: T) -> Self {
        Pool { items: [empty; N], used: [false; N], high: 0, hint: 0, live: 0 }
    }

    /// Take a free record, set it to `v`; None when full. The lowest free
    /// index is taken.
    pub fn alloc(&mut self, v: T) -> Option<u16> {
        let i = match (self.hint..self.high).find(|&i| !self.used[i as usize]) {
            Some(i) => i,
            None if (self.high as usize) < N => {
                self.high += 1;
                self.high - 1
            }
            None => return None,
        };
        self.items[i as usize] = v;
        self.used[i as usize] = true;
        self.live += 1;
        self.hint = i + 1;
        Some(i)
    }

    pub fn free(&mut self, i: u16) {
        if let Some(u) = self.used.get_mut(i as usize) {
            if *u {
                *u = false;
                self.live -= 1;
                self.hint = self.hint.min(i);
            }
        }
    }

    pub fn is_live(&self, i: u16) -> bool {
        self.used.get(i as usize).copied().unwrap_or(false)
    }

    pub fn available(&self) -> usize {
        N - self.live as usize
    }

    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Indices of live records, in index order.
    pub fn live_indices(&self) -> impl Iterator<Item = u16> + '_ {
        (0..self.high).filter(move |i| self.used[*i as usize])
    }
}

impl<T: Copy, const N: usize> core::ops::Index<u16> for Pool<T, N> {
    type Output = T;
    fn index(&self, i: u16) -> &T {
        &self.items[i as usize]
    }
}

impl<T: Copy, const N: usize> core::ops::IndexMut<u16> for Pool<T, N> {
    fn index_mut(&mut self, i: u16) -> &mut T {
        &mut self.items[i as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_reuses_and_refuses_when_full() {
        let mut p: Pool<u32, 3> = Pool::new(0);
        let a = p.alloc(10).unwrap();
        let b = p.alloc(20).unwrap();
        let c = p.alloc(30).unwrap();
        assert_eq!(p.alloc(40), None);
        assert_eq!((p[a], p[b], p[c]), (10, 20, 30));
        p.free(b);
        p.free(b); // double free is ignored
        assert_eq!(p.available(), 1);
        let d = p.alloc(50).unwrap();
        assert_eq!(d, b);
        assert_eq!(p.live_indices().count(), 3);
        assert!(!p.is_live(7));
    }
}
