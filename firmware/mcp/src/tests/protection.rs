//! The privileged side's record of each port's slice of host memory
//! (`regs::PORT_SLICES`): the MCP never uses a page-table entry, nor an
//! event queue, outside the port's own slice, whatever the page table and
//! the port window say.

use super::*;

/// Host bytes per port when the slices are split (the bench's host is
/// 8 MiB: 1 MiB a port).
const SLICE: u64 = HOST as u64 / 8;

impl Bench {
    /// Give each port of node `n` its own 1 MiB slice (port p at p MiB).
    fn split_slices(&mut self, n: usize) {
        for p in 0..8 {
            self.nodes[n].w64(reg(regs::port_slice_base(p)), p as u64 * SLICE);
            self.nodes[n].w64(reg(regs::port_slice_len(p)), SLICE);
            // Virtual address = VBASE + bus address, as before.
            self.nodes[n].w64(reg(regs::port_pt_vbase(p)), VBASE + p as u64 * SLICE);
        }
    }

    /// Map `len` bytes at bus address `bus` into port p's table at a fresh
    /// virtual address near the end of its table (as a hostile table
    /// writer would); returns it.
    fn map_at(&mut self, n: usize, p: usize, bus: u64, len: u64) -> u64 {
        let pages = len.div_ceil(PAGE_SIZE);
        let used = self.nodes[n].r64(reg(regs::port_slice_len(0))) / PAGE_SIZE / 2;
        let used = used + self.nodes[n].hostile;
        self.nodes[n].hostile += pages;
        let base = self.nodes[n].r64(reg(regs::port_pt_vbase(p)));
        let v = base + used * PAGE_SIZE + bus % PAGE_SIZE;
        for (pv, _) in page_table::page_pieces(v, len) {
            let bus_page = (bus + (pv - v)) / PAGE_SIZE;
            self.set_pte(n, p, pv / PAGE_SIZE, pte(bus_page));
        }
        v
    }
}

#[test]
fn a_page_outside_the_ports_slice_is_never_used() {
    let mut b = Bench::new(2);
    b.split_slices(0);
    b.split_slices(1);
    // Node 0 port 1 (slice 1..2 MiB) sends from a page it mapped in port
    // 2's slice: refused, and nothing of port 2's memory leaves.
    b.open_with_evq(0, 1, SLICE);
    assert_eq!(b.events(0, 1)[0].kind, EventKind::PortOpened);
    let secret = 2 * SLICE + 0x1000;
    b.nodes[0].host[secret as usize..secret as usize + 64].fill(0x5e);
    let v = b.map_at(0, 1, secret, 4096);
    b.post(0, 1, send(v, 64, 1, 2, Priority::Low, 7));
    // A receive buffer mapped onto port 2's memory: refused as well.
    let victim = 2 * SLICE + 0x8000;
    let rv = b.map_at(0, 1, victim, 4096);
    b.post(0, 1, provide(rv, 12, Priority::Low, 8));
    b.run(20);
    let evs = b.events(0, 1);
    let got: Vec<(EventKind, u8, u64)> = evs.iter().map(|e| (e.kind, e.status, e.tag)).collect();
    assert_eq!(
        got,
        vec![
            (EventKind::Error, ErrorCause::NotRegistered as u8, 7),
            (EventKind::Error, ErrorCause::NotRegistered as u8, 8)
        ]
    );
    assert_eq!(b.stat(0, Stat::PacketsSent), 0, "nothing left the NIC");
    assert_eq!(b.stat(0, Stat::Errors), 2, "each refusal counted");

    // A put from node 1 into an address node 0 port 1 mapped onto port
    // 2's memory: refused at the target (RemoteAccess), nothing written.
    b.open_with_evq(1, 3, 3 * SLICE);
    b.events(1, 3);
    let src = b.map_at(1, 3, 3 * SLICE + 0x2000, 4096);
    b.nodes[1].host[(3 * SLICE + 0x2000) as usize..(3 * SLICE + 0x2000) as usize + 100].fill(0xee);
    b.post(
        1,
        3,
        Descriptor { kind: DescKind::Put, remote: rv, ..send(src, 100, 0, 1, Priority::Low, 9) },
    );
    let evs = b.await_events(1, 3, 10_000).expect("the put completes");
    assert_eq!((evs[0].kind, evs[0].status), (EventKind::PutDone, SendStatus::RemoteAccess as u8));
    let v0 = victim as usize;
    assert!(
        b.nodes[0].host[v0..v0 + 4096].iter().all(|&x| x == 0),
        "the victim's page is untouched"
    );

    // Inside its slice the same port works.
    let own = b.map_at(0, 1, SLICE + 0x10000, 4096);
    let at = (SLICE + 0x10000) as usize;
    b.nodes[0].host[at..at + 100].copy_from_slice(&pattern(1, 100));
    b.open_with_evq(1, 2, 2 * SLICE);
    b.events(1, 2);
    let mine = b.map_at(1, 2, 2 * SLICE + 0x10000, 4096);
    b.post(1, 2, provide(mine, 7, Priority::Low, 3));
    b.post(0, 1, send(own, 100, 1, 2, Priority::Low, 10));
    let got = b.await_events(1, 2, 10_000).expect("delivered");
    assert_eq!((got[0].kind, got[0].tag, got[0].len), (EventKind::Received, 3, 100));
    let at = (2 * SLICE + 0x10000) as usize;
    assert_eq!(b.nodes[1].host[at..at + 100], pattern(1, 100)[..]);
}

#[test]
fn an_event_queue_outside_the_ports_slice_refuses_the_port() {
    let mut b = Bench::new(2);
    b.split_slices(0);
    // Port 5 points its event queue at port 2's (2 MiB): it is refused,
    // says so, and not one event is written there.
    let before = b.nodes[0].host.clone();
    b.open_with_evq(0, 5, 2 * SLICE);
    assert_eq!(b.nodes[0].r32(port_reg(5, FW_STATE)), STATE_REFUSED);
    assert_eq!(b.stat(0, Stat::Errors), 1);
    // Its descriptors are not served: no send, no event.
    let v = b.map_at(0, 5, 5 * SLICE, 4096);
    b.post(0, 5, send(v, 10, 1, 2, Priority::Low, 1));
    b.run(50);
    assert_eq!(b.nodes[0].r32(port_reg(5, SEND_CONS)), 0);
    assert_eq!(b.stat(0, Stat::PacketsSent), 0);
    // A queue straddling the slice's end is refused too.
    b.nodes[0].w32(port_reg(5, STATE), STATE_CLOSED);
    b.run(3);
    b.open_with_evq(0, 5, 6 * SLICE - 4096);
    assert_eq!(b.nodes[0].r32(port_reg(5, FW_STATE)), STATE_REFUSED);
    assert!(b.nodes[0].host[..HOST] == before[..HOST], "no host byte was written");
    // Opened again with its own queue, it is served.
    b.nodes[0].w32(port_reg(5, STATE), STATE_CLOSED);
    b.run(3);
    b.open_with_evq(0, 5, 5 * SLICE + 0x8000);
    assert_eq!(b.nodes[0].r32(port_reg(5, FW_STATE)), STATE_OPEN);
    assert_eq!(b.events(0, 5)[0].kind, EventKind::PortOpened);
}

/// `PORT_NEWS`: the firmware reads the port windows' `STATE` and
/// `GENERATION` again only after the privileged side moved it. A `STATE`
/// written without news (a host process cannot reach the register) waits
/// for the next news; and whatever the register holds, a new value at
/// every pass or the same one for long, the ports are served as before.
#[test]
fn port_windows_are_read_after_port_news_whatever_its_value() {
    let mut b = Bench::new(2);
    transfer(&mut b, &[100], Priority::Low);
    // Port 5 of node 1 opened after start, without news: not served yet.
    let evq = b.alloc(1, 5, (EVQ_ENTRIES * EVENT_SIZE) as u64);
    let node = &mut b.nodes[1];
    node.w64(evq_bus(5), evq - VBASE);
    node.w32(evq_len(5), EVQ_ENTRIES);
    node.w32_unannounced(port_reg(5, GENERATION), 1);
    node.w32_unannounced(port_reg(5, STATE), STATE_OPEN);
    b.run(20);
    assert_eq!(b.nodes[1].r32(port_reg(5, FW_STATE)), STATE_CLOSED);
    // The news, any new value: it is opened, and says so.
    b.nodes[1].w32(reg(regs::PORT_NEWS), 0xDEAD_BEEF);
    b.run(3);
    assert_eq!(b.nodes[1].r32(port_reg(5, FW_STATE)), STATE_OPEN);
    assert_eq!(b.nodes[1].r32(port_reg(5, FW_GENERATION)), 1);
    assert_eq!(b.events(1, 5)[0].kind, EventKind::PortOpened);
    // Closed without news: still served.
    b.nodes[1].w32_unannounced(port_reg(5, STATE), STATE_CLOSED);
    b.run(20);
    assert_eq!(b.nodes[1].r32(port_reg(5, FW_STATE)), STATE_OPEN);
    // Garbage in the register: a new value at every pass (0 and
    // u32::MAX among them), then one value for long. The close is seen,
    // nothing else changes, and messages still go through.
    let mut x = 0x9E37_79B9u32;
    for k in 0..60 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        let v = match k {
            10 => 0,
            11 => u32::MAX,
            _ => x,
        };
        b.nodes[1].w32(reg(regs::PORT_NEWS), v);
        b.round();
    }
    b.run(50);
    assert_eq!(b.nodes[1].r32(port_reg(5, FW_STATE)), STATE_CLOSED);
    assert_eq!(b.nodes[1].r32(port_reg(2, FW_STATE)), STATE_OPEN);
    assert_eq!(b.nodes[0].r32(port_reg(1, FW_STATE)), STATE_OPEN);
    transfer_again(&mut b);
    assert_eq!(b.stat(1, Stat::Errors), 0);
}
