//! A port's aliases of its page table (`nic_abi::port::WINDOWS`): memory
//! the port registered, named at addresses outside the table's range,
//! for sends, receive buffers, puts and gets alike; gone when the alias
//! goes; never more than the table maps.

use super::*;
use nic_abi::port::{window, window_word, WINDOW_COUNT};

/// A virtual address far from every table's range (where a process's
/// heap or stack might be).
const FOREIGN: u64 = 0x7ffd_0000_0000;

impl Bench {
    /// Alias `w` of port p of node n: `pages` pages from virtual address
    /// `at` translate through the table's entries from the one of `v`.
    fn alias(&mut self, n: usize, p: usize, w: usize, at: u64, v: u64, pages: u32) {
        let base = self.nodes[n].r64(reg(regs::port_pt_vbase(p)));
        let index = ((v - base) / PAGE_SIZE) as u32;
        let node = &mut self.nodes[n];
        node.w64(port_reg(p, window(w)), at / PAGE_SIZE);
        node.w64(port_reg(p, window(w)) + 8, window_word(index, pages));
        // Translations added: the lines go, the cache stays.
        let g = node.r32(port_reg(p, PT_ADDED));
        node.w32(port_reg(p, PT_ADDED), g.wrapping_add(1));
    }

    /// Remove alias `w`: its translations go.
    fn unalias(&mut self, n: usize, p: usize, w: usize) {
        let node = &mut self.nodes[n];
        node.w64(port_reg(p, window(w)), 0);
        node.w64(port_reg(p, window(w)) + 8, 0);
        let g = node.r32(port_reg(p, PT_GEN));
        node.w32(port_reg(p, PT_GEN), g.wrapping_add(1));
    }
}

#[test]
fn memory_named_through_an_alias_is_sent_received_put_and_got_until_the_alias_goes() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    b.events(0, 1);
    b.events(1, 1);
    // Three pages of node 0 port 1, also named at FOREIGN + 0x10 on.
    let len = 3 * PAGE_SIZE;
    let v = b.alloc(0, 1, len);
    b.alias(0, 1, 3, FOREIGN, v, 3);
    let data = pattern(4, 9000);
    b.write_host(0, v + 0x10, &data);
    let far = FOREIGN + 0x10;

    // A send from the alias, into a receive buffer named by an alias on
    // node 1 too.
    let r = b.alloc(1, 1, 4 * PAGE_SIZE);
    b.alias(1, 1, 0, FOREIGN + 0x100_0000, r, 4);
    b.post(1, 1, provide(FOREIGN + 0x100_0000, 14, Priority::Low, 5));
    b.post(0, 1, send(far, 9000, 1, 1, Priority::Low, 6));
    let got = b.await_events(1, 1, 10_000).expect("delivered");
    assert_eq!((got[0].kind, got[0].tag, got[0].len), (EventKind::Received, 5, 9000));
    assert_eq!(got[0].addr, FOREIGN + 0x100_0000, "the event names the buffer as provided");
    assert_eq!(b.read_host(1, r, 9000), data);

    // A put into the alias from node 1, and a get from it.
    let src = b.alloc(1, 1, PAGE_SIZE);
    b.write_host(1, src, &pattern(9, 3000));
    let put = Descriptor {
        kind: DescKind::Put,
        remote: far + 5000,
        ..send(src, 3000, 0, 1, Priority::Low, 7)
    };
    b.post(1, 1, put);
    let evs = b.await_events(1, 1, 10_000).expect("the put completes");
    assert_eq!((evs[0].kind, evs[0].status), (EventKind::PutDone, SendStatus::Ok as u8));
    assert_eq!(b.read_host(0, v + 0x10 + 5000, 3000), pattern(9, 3000));
    let dst = b.alloc(1, 1, PAGE_SIZE);
    let get =
        Descriptor { kind: DescKind::Get, remote: far, ..send(dst, 4000, 0, 1, Priority::Low, 8) };
    b.post(1, 1, get);
    let evs = b.await_events(1, 1, 10_000).expect("the get completes");
    assert_eq!((evs[0].kind, evs[0].status), (EventKind::GetDone, SendStatus::Ok as u8));
    assert_eq!(b.read_host(1, dst, 4000), data[..4000]);

    // The alias gone, the address means nothing: a send is refused, a put
    // is refused at the target and writes nothing.
    // (The first send's completion first.)
    b.run(20);
    let sent: Vec<(EventKind, u8, u64)> =
        b.events(0, 1).iter().map(|e| (e.kind, e.status, e.tag)).collect();
    assert_eq!(sent, vec![(EventKind::Sent, SendStatus::Ok as u8, 6)]);
    b.unalias(0, 1, 3);
    b.post(0, 1, send(far, 100, 1, 1, Priority::Low, 9));
    let evs = b.await_events(0, 1, 10_000).expect("refused");
    assert_eq!(
        (evs[0].kind, evs[0].status, evs[0].tag),
        (EventKind::Error, ErrorCause::NotRegistered as u8, 9)
    );
    let before = b.read_host(0, v, len as usize);
    b.post(1, 1, put);
    let evs = b.await_events(1, 1, 10_000).expect("the put completes");
    assert_eq!((evs[0].kind, evs[0].status), (EventKind::PutDone, SendStatus::RemoteAccess as u8));
    assert_eq!(b.read_host(0, v, len as usize), before);
}

#[test]
fn an_alias_reaches_no_page_the_table_does_not_map() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.events(0, 1);
    let v = b.alloc(0, 1, PAGE_SIZE);
    // Two pages through an alias whose second page's entry is not valid,
    // and an alias past the table's end: a send over either is refused.
    b.alias(0, 1, 0, FOREIGN, v, 2);
    let entries = b.nodes[0].r64(reg(regs::port_slice_len(1))) / PAGE_SIZE;
    let base = b.nodes[0].r64(reg(regs::port_pt_vbase(1)));
    b.alias(0, 1, WINDOW_COUNT - 1, FOREIGN + 0x1000_0000, base + (entries - 1) * PAGE_SIZE, 4);
    b.post(0, 1, send(FOREIGN + 100, PAGE_SIZE as u32, 1, 1, Priority::Low, 1));
    b.post(0, 1, send(FOREIGN + 0x1000_0000 + PAGE_SIZE, 10, 1, 1, Priority::Low, 2));
    b.run(30);
    let got: Vec<(EventKind, u8, u64)> =
        b.events(0, 1).iter().map(|e| (e.kind, e.status, e.tag)).collect();
    assert_eq!(
        got,
        vec![
            (EventKind::Error, ErrorCause::NotRegistered as u8, 1),
            (EventKind::Error, ErrorCause::NotRegistered as u8, 2)
        ]
    );
    assert_eq!(b.stat(0, Stat::PacketsSent), 0);
}

#[test]
fn the_neighbours_of_an_aliased_page_stay_unknown_though_their_entries_were_read() {
    let mut b = Bench::new(2);
    b.open(0, 1);
    b.open(1, 1);
    b.events(0, 1);
    b.events(1, 1);
    // Three registered pages; only the middle one aliased. The line the
    // NIC reads for it holds its neighbours' entries too.
    let v = b.alloc(0, 1, 3 * PAGE_SIZE);
    b.alias(0, 1, 0, FOREIGN + PAGE_SIZE, v + PAGE_SIZE, 1);
    let r = b.alloc(1, 1, PAGE_SIZE);
    b.post(1, 1, provide(r, 7, Priority::Low, 1));
    b.post(0, 1, send(FOREIGN + PAGE_SIZE, 100, 1, 1, Priority::Low, 2));
    let got = b.await_events(1, 1, 10_000).expect("delivered");
    assert_eq!((got[0].kind, got[0].len), (EventKind::Received, 100));
    let sent = b.await_events(0, 1, 10_000).expect("its completion");
    assert_eq!((sent[0].kind, sent[0].tag), (EventKind::Sent, 2));
    // The pages before and after it at the alias's addresses: refused.
    b.post(0, 1, send(FOREIGN, 100, 1, 1, Priority::Low, 3));
    b.post(0, 1, send(FOREIGN + 2 * PAGE_SIZE, 100, 1, 1, Priority::Low, 4));
    b.run(30);
    let got: Vec<(EventKind, u8, u64)> =
        b.events(0, 1).iter().map(|e| (e.kind, e.status, e.tag)).collect();
    assert_eq!(
        got,
        vec![
            (EventKind::Error, ErrorCause::NotRegistered as u8, 3),
            (EventKind::Error, ErrorCause::NotRegistered as u8, 4)
        ]
    );
}
