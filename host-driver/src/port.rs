//! A port: one process's endpoint on the NIC. Owns the port's window in
//! SRAM (control block + send ring, `nic_abi::port`), its page table
//! (`memory.rs`), its event queue in host memory, and its token counts.
//!
//! Open (after `nic_abi::port`): the driver allocates and zeroes the event
//! queue, clears the page table, registers the event queue
//! (`regs::port_evq_bus`/`port_evq_len`, privileged: a live backend sends
//! it to the device process), writes EVQ_CONSUMED = 0,
//! SEND_PROD = 0 and SEND_CONS = 0, bumps GENERATION, then sets
//! STATE = OPEN (Release) and rings the doorbell. The firmware answers with a PortOpened event.
//! Descriptors may be posted at once: they wait in the ring.
//!
//! Close (also on drop): STATE = CLOSED, doorbell, the page table cleared
//! (every registration gone at once). The port's host memory (event queue
//! and buffers) is freed only once the firmware has let go of this
//! generation (FW_GENERATION == ours with FW_STATE closed, or a later
//! generation served): until then the NIC may still write into it. Frees
//! held back are retried at the next open, close or allocation on the same
//! `Nic`.
//!
//! Posting: write the 64-byte descriptor into ring slot SEND_PROD, bump
//! SEND_PROD (Release), ring the doorbell, charge `HostOp::PostDescriptor`.
//! Ring space: the driver keeps the last SEND_CONS it read and reads the
//! word again only when its cached view says full, and then only if the
//! firmware serves this generation (FW_GENERATION == ours; before that the
//! firmware has taken nothing, and a firmware still finishing the previous
//! generation could write a stale SEND_CONS over the opener's zero).
//!
//! Events: slot `n % EVQ_LEN` holds event `n` with `seq = n + 1`. `poll`
//! reads the seq word (Acquire) and takes the slot when it matches.
//! EVQ_CONSUMED is written back in batches: when half the queue has been
//! consumed since the last write, before `wait` blocks, and on
//! `report_consumed`. The queue holds at least 2 * (tokens + 8) entries
//! rounded up to a power of two, so unreported consumption (< half the
//! queue) plus every event that can be outstanding (one per token, the
//! alarm, PortOpened) always fits: the NIC never finds the queue full
//! because of the batching, and a host that has drained the queue never
//! leaves the NIC waiting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nic_abi::desc::{DescKind, Descriptor, DESC_SIZE};
use nic_abi::event::{self as abi, EventKind, EVENT_SEQ_OFFSET, EVENT_SIZE};
use nic_abi::map::SEND_RING_LEN;
use nic_abi::port::{self as pcb, port_reg, send_slot};
use nic_abi::regs;
use nic_abi::{Priority, MAX_NODES, NUM_PORTS};

use crate::backend::{HostOp, NicBackend};
use crate::event::{from_abi, token_back, token_of, token_of_byte, Event, TokenBack};
use crate::memory::{DmaBuf, Memory};
use crate::nic::NicInfo;
use crate::opts::{Dest, GetOpts, PutOpts, RecvOpts, RemoteAddr, SendOpts};
use crate::{DownCause, DriverError};

/// Largest event queue a port may ask for (entries).
pub const MAX_EVENT_QUEUE_LEN: u32 = 1 << 20;

/// Per-port choices; `PortOptions::default()` takes the NIC's values.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortOptions {
    /// Use fewer send tokens than the NIC gives a port (1..=SEND_TOKENS).
    pub send_tokens: Option<u32>,
    /// Use fewer receive tokens (1..=RECV_TOKENS).
    pub recv_tokens: Option<u32>,
    /// Event queue entries: a power of two, at least the default
    /// (`default_event_queue_len`), at most `MAX_EVENT_QUEUE_LEN`.
    pub event_queue_len: Option<u32>,
}

/// Default (and smallest) event queue for these token counts: the next
/// power of two >= send + recv + 8, doubled.
pub fn default_event_queue_len(send_tokens: u32, recv_tokens: u32) -> u32 {
    (send_tokens + recv_tokens + 8).next_power_of_two() * 2
}

/// What a port has done, for tests and reports.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PortStats {
    /// Descriptors written into the send ring.
    pub posted: u64,
    /// Event records consumed (including bad ones).
    pub events: u64,
    /// Event records the driver could not decode (skipped; their token,
    /// if the kind byte named one, was still returned).
    pub bad_events: u64,
    /// Polls that found nothing.
    pub empty_polls: u64,
    /// Writes of EVQ_CONSUMED to SRAM.
    pub consumed_writes: u64,
}

/// State shared by every port of one `Nic`: host memory whose free waits
/// for the firmware to let go of a closed port.
#[derive(Default)]
pub(crate) struct Shared {
    deferred: Vec<Deferred>,
}

struct Deferred {
    port: u8,
    generation: u32,
    mem: Vec<(u64, u64)>,
}

impl Shared {
    /// Free the memory of closed ports the firmware no longer serves.
    pub(crate) fn reap<B: NicBackend>(&mut self, be: &B) {
        self.deferred.retain(|d| {
            if !released(be, d.port, d.generation) {
                return true;
            }
            for &(bus, len) in &d.mem {
                be.free_dma(bus, len);
            }
            false
        });
    }

    pub(crate) fn has_deferred(&self) -> bool {
        !self.deferred.is_empty()
    }
}

/// Has the firmware let go of generation `generation` of `port`?
fn released<B: NicBackend>(be: &B, port: u8, generation: u32) -> bool {
    let p = port as usize;
    let fw_gen = be.sram_load_u32(port_reg(p, pcb::FW_GENERATION));
    let fw_state = be.sram_load_u32(port_reg(p, pcb::FW_STATE));
    (fw_gen == generation && fw_state != pcb::STATE_OPEN)
        || (fw_gen.wrapping_sub(generation) as i32) > 0
}

pub(crate) fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// Operations whose successful completion the caller did not ask for
/// (`SendOpts::notify`, `PutOpts::notify` false), by (kind, tag): `recv`
/// skips that many successful completions of each. Completions are matched
/// by tag, as the NIC reports them.
#[derive(Debug, Default)]
struct Quiet {
    /// (kind byte, tag) -> count. (`DescKind` is not `Hash`.)
    pending: HashMap<(u8, u64), u32>,
}

impl Quiet {
    fn add(&mut self, kind: DescKind, tag: u64) {
        *self.pending.entry((kind as u8, tag)).or_insert(0) += 1;
    }

    /// Settle one quiet operation of (kind, tag), if there is one.
    fn take(&mut self, kind: DescKind, tag: u64) -> bool {
        let key = (kind as u8, tag);
        match self.pending.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => {
                self.pending.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Account for `e`; true if `recv` should skip it: a PortOpened, or
    /// the successful completion of a quiet operation. Failures (a
    /// completion with another status, an Error event) settle the quiet
    /// operation and are never skipped.
    fn skip(&mut self, e: &Event) -> bool {
        match *e {
            Event::PortOpened { .. } => true,
            Event::Sent { tag, status, mcast: None, .. } => {
                self.take(DescKind::Send, tag) && status == nic_abi::event::SendStatus::Ok
            }
            Event::PutDone { tag, status, .. } => {
                self.take(DescKind::Put, tag) && status == nic_abi::event::SendStatus::Ok
            }
            Event::Error {
                tag, desc_kind: Some(kind @ (DescKind::Send | DescKind::Put)), ..
            } => {
                self.take(kind, tag);
                false
            }
            _ => false,
        }
    }
}

/// The node table (`nic_abi::port::NODE_TABLE`) of the nodes a port
/// watches, as it last saw it.
struct News {
    /// `NODE_NEWS` when every watched entry last matched.
    seen: u32,
    /// Watched nodes, a bit each.
    watched: Box<[u64; MAX_NODES / 64]>,
    /// Each watched node's entry as last seen.
    entries: Box<[u16; MAX_NODES]>,
    /// The watched nodes, in the order they were first watched.
    list: Vec<u16>,
    /// This port's own NIC is gone or was reset: what every check says.
    down: Option<DriverError>,
}

impl News {
    fn new() -> News {
        News {
            seen: 0,
            watched: Box::new([0; MAX_NODES / 64]),
            entries: Box::new([0; MAX_NODES]),
            list: Vec::new(),
            down: None,
        }
    }

    fn watches(&self, n: usize) -> bool {
        self.watched[n / 64] & (1 << (n % 64)) != 0
    }

    fn add(&mut self, n: usize, entry: u16) {
        self.watched[n / 64] |= 1 << (n % 64);
        self.entries[n] = entry;
        self.list.push(n as u16);
    }
}

/// An open port: one endpoint on a NIC, with its own DMA memory, receive
/// buffers and event queue. Dropping it closes it.
///
/// A program on a live or qemu cluster opens one with [`Port::attach`]
/// and uses the everyday calls: [`alloc`](Port::alloc) /
/// [`alloc_from`](Port::alloc_from) (registered DMA memory),
/// [`provide`](Port::provide), [`send_to`](Port::send_to),
/// [`put_to`](Port::put_to), [`get_from`](Port::get_from), and
/// [`recv`](Port::recv) / [`recv_timeout`](Port::recv_timeout) /
/// [`try_recv`](Port::try_recv) for what came back ([`recv_any`](Port::recv_any)
/// on several ports at once). The raw calls
/// (`send`, `provide_receive_buffer`, `put`, `get`, `post_raw`, `poll`,
/// `wait`) stay for programs that want every event and every field.
///
/// Tokens: a send, put or get holds a send token, a provided buffer a
/// receive token, until the driver reads its completion from the event
/// queue ([`send_tokens`](Port::send_tokens),
/// [`send_tokens_free`](Port::send_tokens_free),
/// [`sends_in_flight`](Port::sends_in_flight) and their receive
/// counterparts say how many). Completions: [`recv`](Port::recv) returns
/// every `Received`, every failure, and the successful completions asked
/// for with `notify` (or, after `NoSendToken`, the one that frees a
/// token); [`send_to`](Port::send_to) and [`provide`](Port::provide) say
/// more. `host-driver/examples/stream.rs` keeps a window of sends in
/// flight with them.
///
/// ```no_run
/// use std::time::Duration;
/// use host_driver::{Dest, Port, RecvOpts, SendOpts};
///
/// # fn main() -> Result<(), host_driver::DriverError> {
/// // Port 2 of node 0 of the running cluster named "nic".
/// let mut port = Port::attach("nic", 0, 2)?;
/// let inbox = port.alloc(4096)?;
/// port.provide(&inbox, RecvOpts::default())?; // messages of 2049 to 4096 bytes
/// let msg = port.alloc_from(&[7u8; 3000])?;
/// port.send_to(&msg, Dest { node: 1, port: 2 }, SendOpts::default())?;
/// let reply = port.recv_timeout(Duration::from_secs(5))?;
/// println!("{} bytes back", port.read_message(&reply)?.len());
/// # Ok(())
/// # }
/// ```
pub struct Port<B: NicBackend> {
    pub(crate) be: B,
    pub(crate) shared: Arc<Mutex<Shared>>,
    pub(crate) num: u8,
    generation: u32,
    open: bool,
    send_max: u32,
    send_free: u32,
    recv_max: u32,
    recv_free: u32,
    /// Descriptors posted (our copy of SEND_PROD).
    prod: u32,
    /// Last SEND_CONS read.
    cons_seen: u32,
    evq_bus: u64,
    evq_len: u32,
    /// Events consumed (next expected seq is consumed + 1).
    consumed: u32,
    /// Last value written to EVQ_CONSUMED.
    reported: u32,
    pub(crate) mem: Memory,
    stats: PortStats,
    /// The device's HEARTBEAT as last read, and when it was seen to move.
    heartbeat: (u32, u64),
    /// This NIC's node id (read once, at open).
    pub(crate) node: u16,
    /// What the device publishes of the nodes this port talks with.
    news: News,
    quiet: Quiet,
    /// A post was refused `NoSendToken` and no send token has come back
    /// to the program since: the next event that gives one back is
    /// returned by `recv` even when it is a quiet completion (so a wait
    /// for a token ends as soon as there is one).
    send_token_wanted: bool,
    /// Multicasts' lost heads from `McastLost` events, by the root's tag,
    /// until their Sent event comes (right after them).
    lost: Vec<(u64, nic_abi::event::LostHeads)>,
    /// Each group's last collective number posted (collective.rs).
    cseqs: [u32; nic_abi::map::GROUP_ENTRIES as usize],
}

impl<B: NicBackend> Port<B> {
    pub(crate) fn open(
        be: B,
        shared: Arc<Mutex<Shared>>,
        info: &NicInfo,
        num: u8,
        opts: PortOptions,
    ) -> Result<Port<B>, DriverError> {
        if num as usize >= NUM_PORTS {
            return Err(DriverError::BadPort(num));
        }
        if let Some(attached) = be.port_hint() {
            if attached != num {
                return Err(DriverError::PortNotAttached { port: num, attached });
            }
        }
        let send_max = pick_tokens(opts.send_tokens, info.send_tokens, "send_tokens")?;
        let recv_max = pick_tokens(opts.recv_tokens, info.recv_tokens, "recv_tokens")?;
        let min_len = default_event_queue_len(send_max, recv_max);
        let evq_len = match opts.event_queue_len {
            None => min_len,
            Some(n) if n.is_power_of_two() && n >= min_len && n <= MAX_EVENT_QUEUE_LEN => n,
            Some(_) => return Err(DriverError::InvalidOption("event_queue_len")),
        };
        let p = num as usize;
        lock(&shared).reap(&be);
        if be.sram_load_u32(port_reg(p, pcb::STATE)) == pcb::STATE_OPEN {
            return Err(DriverError::PortBusy(num));
        }

        // Event queue: zeroed, so stale records never look fresh.
        let evq_bytes = evq_len as u64 * EVENT_SIZE as u64;
        let evq_bus = be.alloc_dma(evq_bytes).ok_or(DriverError::OutOfMemory { len: evq_bytes })?;
        be.host_write(evq_bus, &vec![0u8; evq_bytes as usize]);

        let mut mem = Memory::new(num, &be);
        mem.table.clear(&be);
        mem.clear_aliases(&be);

        // The event queue's registration, both words in one write (a live
        // backend's device process checks them together).
        let mut evq = [0u8; 12];
        evq[..8].copy_from_slice(&evq_bus.to_le_bytes());
        evq[8..].copy_from_slice(&evq_len.to_le_bytes());
        be.sram_write(regs::reg(regs::port_evq_bus(p)), &evq);
        be.sram_store_u32(port_reg(p, pcb::EVQ_CONSUMED), 0);
        be.sram_store_u32(port_reg(p, pcb::SEND_PROD), 0);
        // SEND_CONS is the firmware's, but a closed port is not served, so
        // the opener zeroes it too (nic_abi::port).
        be.sram_store_u32(port_reg(p, pcb::SEND_CONS), 0);
        let generation = be.sram_load_u32(port_reg(p, pcb::GENERATION)).wrapping_add(1);
        be.sram_store_u32(port_reg(p, pcb::GENERATION), generation);
        be.sram_store_u32(port_reg(p, pcb::STATE), pcb::STATE_OPEN);
        be.doorbell();

        let mut port = Port {
            be,
            shared,
            num,
            generation,
            open: true,
            send_max,
            send_free: send_max,
            recv_max,
            recv_free: recv_max,
            prod: 0,
            cons_seen: 0,
            evq_bus,
            evq_len,
            consumed: 0,
            reported: 0,
            mem,
            stats: PortStats::default(),
            heartbeat: (0, 0),
            node: info.node_id,
            news: News::new(),
            quiet: Quiet::default(),
            send_token_wanted: false,
            lost: Vec::new(),
            cseqs: [0; nic_abi::map::GROUP_ENTRIES as usize],
        };
        // Its own NIC, watched from the open (a reset of it closes the
        // port).
        port.watch(port.node);
        Ok(port)
    }

    /// Watch node `node`'s NIC: from now on a wait on this port fails
    /// with `PeerReset { node }` when that NIC is reset (reflashed, or
    /// reset by its device process) and with `NicDown { node, .. }` when
    /// it goes down (its QEMU died, its firmware halted), once per
    /// change, within a heartbeat (`HEARTBEAT_PERIOD_MS`). A port
    /// watches its own NIC, and every node it sends to (`send`, `put`,
    /// `get`, a multicast's members) or receives from, by itself; a
    /// program that waits for the first message of a node it has not
    /// talked with yet calls this first. Only on backends whose device
    /// publishes node news (live and qemu clusters); a no-op for a node
    /// beyond `MAX_NODES`.
    pub fn watch(&mut self, node: u16) {
        let n = node as usize;
        if n >= MAX_NODES || self.news.watches(n) {
            return;
        }
        let entry = self.node_entry(n);
        self.news.add(n, entry);
    }

    /// Node `n`'s entry in this port's window's node table.
    fn node_entry(&self, n: usize) -> u16 {
        pcb::node_entry(self.be.sram_load_u32(port_reg(self.num as usize, pcb::node_word(n))), n)
    }

    /// Did a node this port watches change (`NODE_NEWS` moved)? The first
    /// change found is the error (the next check looks for more); its
    /// entry is taken as seen. A change of this port's own NIC is kept:
    /// every later wait fails with it.
    fn check_news(&mut self) -> Result<(), DriverError> {
        let news = self.be.sram_load_u32(port_reg(self.num as usize, pcb::NODE_NEWS));
        if news == self.news.seen {
            return Ok(());
        }
        for i in 0..self.news.list.len() {
            let n = self.news.list[i] as usize;
            let (was, now) = (self.news.entries[n], self.node_entry(n));
            if was == now {
                continue;
            }
            self.news.entries[n] = now;
            let node = n as u16;
            let reset = (was ^ now) & pcb::NODE_RESETS != 0;
            let e = match pcb::node_state(now) {
                pcb::NODE_GONE => DriverError::NicDown { node, why: DownCause::Qemu },
                pcb::NODE_HALTED => DriverError::NicDown { node, why: DownCause::Firmware },
                _ if reset && node == self.node => DriverError::NicReset { node },
                _ if reset => DriverError::PeerReset { node },
                _ => continue,
            };
            if node == self.node {
                self.news.down = Some(e.clone());
            }
            return Err(e);
        }
        self.news.seen = news;
        Ok(())
    }

    /// Close the port: STATE = CLOSED, every registration removed, memory
    /// freed once the firmware lets go (see the module notes).
    pub fn close(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        let p = self.num as usize;
        self.be.sram_store_u32(port_reg(p, pcb::STATE), pcb::STATE_CLOSED);
        self.be.doorbell();
        self.mem.table.clear(&self.be);
        let mut mem = self.mem.take_allocations();
        mem.push((self.evq_bus, self.evq_len as u64 * EVENT_SIZE as u64));
        let mut shared = lock(&self.shared);
        shared.deferred.push(Deferred { port: self.num, generation: self.generation, mem });
        shared.reap(&self.be);
    }

    // ----- identity and accounting -----

    pub fn number(&self) -> u8 {
        self.num
    }

    /// This port's node and number: where a peer sends to reach it.
    pub fn address(&self) -> Dest {
        Dest { node: self.node, port: self.num }
    }

    /// The GENERATION this open wrote.
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Is the firmware serving this open (FW_GENERATION == ours and
    /// FW_STATE open)? One PIO read pair; PortOpened says the same.
    pub fn nic_serving(&self) -> bool {
        let p = self.num as usize;
        self.be.sram_load_u32(port_reg(p, pcb::FW_GENERATION)) == self.generation
            && self.be.sram_load_u32(port_reg(p, pcb::FW_STATE)) == pcb::STATE_OPEN
    }

    /// Did the NIC close this port on its holder's behalf? A NIC reset
    /// writes every port's `STATE` closed, a word only the holder writes
    /// otherwise. Unlike `!nic_serving()`, this also tells a reset that
    /// came before the firmware saw the open (no `PortOpened` will come)
    /// from an open still on its way. One PIO read.
    pub fn closed_by_nic(&self) -> bool {
        self.open
            && self.be.sram_load_u32(port_reg(self.num as usize, pcb::STATE)) != pcb::STATE_OPEN
    }

    /// Send tokens this port has: the most sends, puts and gets it can
    /// have posted and not yet completed. The NIC's configuration sets
    /// it (32 on the `lanai9-gm` profile), `PortOptions::send_tokens` may
    /// lower it.
    ///
    /// ```no_run
    /// use host_driver::Port;
    /// # fn main() -> Result<(), host_driver::DriverError> {
    /// let port = Port::attach("nic", 0, 1)?;
    /// // A sender keeps at most this many sends in flight (its window).
    /// let window = port.send_tokens().min(8);
    /// assert_eq!(port.send_tokens_free(), port.send_tokens()); // nothing posted yet
    /// assert_eq!(port.sends_in_flight(), 0);
    /// # let _ = window;
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_tokens(&self) -> u32 {
        self.send_max
    }

    /// Receive tokens this port has: the most receive buffers it can
    /// have provided and not yet filled (32 on `lanai9-gm`;
    /// `PortOptions::recv_tokens` may lower it).
    pub fn recv_tokens(&self) -> u32 {
        self.recv_max
    }

    /// Send tokens free now: how many more sends, puts or gets can be
    /// posted before `NoSendToken`. A token comes back when the driver
    /// reads the completion of the operation that held it (any call that
    /// reads events does, whether or not it hands the completion to the
    /// program).
    pub fn send_tokens_free(&self) -> u32 {
        self.send_free
    }

    /// Receive tokens free now: how many more buffers can be provided
    /// before `NoRecvToken`. One comes back with each `Received` event.
    pub fn recv_tokens_free(&self) -> u32 {
        self.recv_free
    }

    /// Sends, puts and gets posted whose completion the driver has not
    /// read yet (the send tokens in use).
    pub fn sends_in_flight(&self) -> u32 {
        self.send_max - self.send_free
    }

    /// Receive buffers provided that no message has filled yet, as far
    /// as the driver has read (the receive tokens in use).
    pub fn receive_buffers_posted(&self) -> u32 {
        self.recv_max - self.recv_free
    }

    pub fn event_queue_len(&self) -> u32 {
        self.evq_len
    }

    /// Bus address of the event queue in host memory.
    pub fn event_queue_bus(&self) -> u64 {
        self.evq_bus
    }

    pub fn stats(&self) -> PortStats {
        self.stats
    }

    pub fn backend(&self) -> &B {
        &self.be
    }

    // ----- the everyday calls -----

    /// Send all of `buf` to the port `to`, into one of its receive buffers
    /// of the message's size class and `opts.priority` (see [`SendOpts`]).
    ///
    /// Completion: the send holds a send token until the driver reads its
    /// completion from the event queue; `NoSendToken` when none is free.
    /// The buffer must stay unchanged until the send completes. What
    /// `recv` returns of it:
    /// - with `opts.notify`, its `Event::Sent` (status Ok), tagged
    ///   `opts.tag`: the buffer is free to change;
    /// - without, nothing when it succeeds, unless the program is waiting
    ///   for a token (a post was refused `NoSendToken` since the last
    ///   token came back): then the completion that frees the next token
    ///   is returned, so `recv_timeout` after `NoSendToken` returns as
    ///   soon as a send can go;
    /// - a failure always (`Sent` with another status, or `Error`).
    ///
    /// A message that finds no receive buffer of its class at the target
    /// is turned away and sent again later (after 100 us on `lanai9-gm`,
    /// the wait doubling while refusals go on): keep the receiver's
    /// buffers ahead of the sends in flight for full speed (a window:
    /// `host-driver/examples/stream.rs`).
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use host_driver::{AttachOptions, Dest, DriverError, Port, PortOptions, SendOpts};
    ///
    /// # fn main() -> Result<(), DriverError> {
    /// // At most 8 sends in flight: fewer than the receiver's 16 buffers
    /// // (`provide`), so none is turned away while it reads a message.
    /// let opts = PortOptions { send_tokens: Some(8), ..PortOptions::default() };
    /// let mut tx = Port::attach_with("nic", 0, 1, &AttachOptions::default(), opts)?;
    /// let msg = tx.alloc_from(&[1u8; 4096])?;
    /// for _ in 0..1000 {
    ///     loop {
    ///         match tx.send_to(&msg, Dest::new(1, 1), SendOpts::default()) {
    ///             Ok(()) => break,
    ///             Err(DriverError::NoSendToken) => {
    ///                 // Returns as soon as a send completes and frees a token.
    ///                 tx.recv_timeout(Duration::from_millis(100))?;
    ///             }
    ///             Err(e) => return Err(e),
    ///         }
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn send_to(&mut self, buf: &DmaBuf, to: Dest, opts: SendOpts) -> Result<(), DriverError> {
        let class = opts.size_class(buf.len)?;
        let len = whole_len(buf)?;
        self.send(buf, 0, len, class, opts.priority, to.node, to.port, opts.tag)?;
        if !opts.notify {
            self.quiet.add(DescKind::Send, opts.tag);
        }
        Ok(())
    }

    /// Give the NIC all of `buf` as a receive buffer (see [`RecvOpts`]:
    /// by default for the largest size class it holds). Takes a receive
    /// token, back with the `Event::Received` of the message that fills
    /// it (always returned by `recv`); read the message with
    /// [`read_message`](Port::read_message), then the buffer is the
    /// program's again: provide it anew to receive more. A message that
    /// comes when no buffer of its class is provided waits at its sender
    /// (see [`send_to`](Port::send_to)), so a receiver provides several
    /// buffers, before its senders start, and provides each again at once.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use host_driver::{Event, Port, RecvOpts};
    ///
    /// # fn main() -> Result<(), host_driver::DriverError> {
    /// let mut rx = Port::attach("nic", 1, 1)?;
    /// let mut inbox = Vec::new();
    /// for tag in 0..16 {
    ///     let b = rx.alloc(4096)?;
    ///     rx.provide(&b, RecvOpts { tag, ..RecvOpts::default() })?;
    ///     inbox.push(b);
    /// }
    /// for _ in 0..1000 {
    ///     let e = rx.recv_timeout(Duration::from_millis(100))?; // as soon as a message is there
    ///     if let Event::Received { tag, .. } = e {
    ///         let bytes = rx.read_message(&e)?;
    ///         println!("{} bytes", bytes.len());
    ///         rx.provide(&inbox[tag as usize], RecvOpts { tag, ..RecvOpts::default() })?;
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn provide(&mut self, buf: &DmaBuf, opts: RecvOpts) -> Result<(), DriverError> {
        let class = opts.size_class(buf.len)?;
        self.provide_receive_buffer(buf, class, opts.priority, opts.tag)
    }

    /// Write all of `buf` into the remote port's registered memory at
    /// `to` (see [`PutOpts`]). Takes a send token.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use host_driver::{Dest, GetOpts, Port, PutOpts};
    ///
    /// # fn main() -> Result<(), host_driver::DriverError> {
    /// let mut port = Port::attach("nic", 0, 2)?;
    /// // Node 1's port 2 registered a buffer and told us its address.
    /// let there = Dest { node: 1, port: 2 }.at(0x1000_0200_0000_1000);
    /// let data = port.alloc_from(&[42u8; 512])?;
    /// port.put_to(&data, there, PutOpts::default())?;
    /// let back = port.alloc(512)?;
    /// port.get_from(&back, there, GetOpts { tag: 9, ..GetOpts::default() })?;
    /// let done = port.recv_timeout(Duration::from_secs(5))?; // Event::GetDone, tag 9
    /// # drop(done);
    /// # Ok(())
    /// # }
    /// ```
    pub fn put_to(
        &mut self,
        buf: &DmaBuf,
        to: RemoteAddr,
        opts: PutOpts,
    ) -> Result<(), DriverError> {
        let len = whole_len(buf)?;
        self.put(buf, 0, len, to.node, to.port, to.vaddr, opts.priority, opts.tag)?;
        if !opts.notify {
            self.quiet.add(DescKind::Put, opts.tag);
        }
        Ok(())
    }

    /// Read `buf.len` bytes of the remote port's registered memory at
    /// `from` into all of `buf` (see [`GetOpts`]). Takes a send token; the
    /// data is there when `recv` returns its `Event::GetDone`.
    pub fn get_from(
        &mut self,
        buf: &DmaBuf,
        from: RemoteAddr,
        opts: GetOpts,
    ) -> Result<(), DriverError> {
        let len = whole_len(buf)?;
        self.get(buf, 0, len, from.node, from.port, from.vaddr, opts.priority, opts.tag)
    }

    /// The next event for the program, if the NIC has written one; never
    /// blocks. Returns what `recv` returns.
    pub fn try_recv(&mut self) -> Option<Event> {
        loop {
            let (e, skip) = self.next_event()?;
            if !skip {
                return Some(e);
            }
        }
    }

    /// Wait for the next event for the program, as long as it takes (or
    /// until the NIC goes down: `NicDown`). It returns as soon as the NIC
    /// has written one (on a live or qemu cluster the wait polls the
    /// event queue in memory, yielding the CPU between looks, see
    /// `IdlePolicy`). Returns:
    /// - `Event::Received`: a message landed in a buffer given to
    ///   [`provide`](Port::provide) (read it with
    ///   [`read_message`](Port::read_message));
    /// - `Event::Sent` / `Event::PutDone`: a send or put completed, when
    ///   it failed (a status other than Ok), its options asked to be
    ///   told (`notify`), or the program waits for a send token (a post
    ///   was refused `NoSendToken` since the last one came back: the
    ///   completion that frees the next one is returned);
    /// - `Event::GetDone`: a get completed (the data is in its buffer if
    ///   the status is Ok);
    /// - `Event::Error`: the NIC refused a descriptor;
    /// - `Event::Alarm`: an alarm set with `set_alarm` went off.
    ///
    /// It never returns `Event::PortOpened` (the NIC's note that it serves
    /// the port) nor, unless the program waits for a send token, the
    /// successful completion of a send or put that did not ask for it: it
    /// consumes them (their tokens come back) and waits on. On a backend
    /// that cannot block (the sim) an empty queue is `WouldBlock` at once.
    pub fn recv(&mut self) -> Result<Event, DriverError> {
        self.recv_timeout(Duration::MAX)
    }

    /// As [`recv`](Port::recv), but `Timeout` if nothing for the program
    /// came within `timeout`. It returns the event as soon as it is
    /// there: the timeout bounds only a wait in which nothing comes, so a
    /// program may wait in slices (100 ms, say) and look at other things
    /// between them.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use host_driver::{DriverError, Port};
    ///
    /// # fn main() -> Result<(), DriverError> {
    /// let mut port = Port::attach("nic", 1, 0)?;
    /// loop {
    ///     match port.recv_timeout(Duration::from_millis(100)) {
    ///         Ok(e) => println!("{e:?}"),
    ///         Err(DriverError::Timeout) => println!("nothing for 100 ms"),
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// # }
    /// ```
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<Event, DriverError> {
        self.wait_for(timeout, Port::try_recv)
    }

    /// The bytes of a received message: `e` must be an `Event::Received`
    /// of this port (else `NotAMessage`); its `len` bytes are read from
    /// the buffer it names. The buffer is the caller's again (provide it
    /// anew to receive more).
    pub fn read_message(&self, e: &Event) -> Result<Vec<u8>, DriverError> {
        let Event::Received { buffer, len, .. } = *e else {
            return Err(DriverError::NotAMessage(Box::new(*e)));
        };
        let base = crate::memory::vaddr_of(self.num, 0);
        let bus = buffer.checked_sub(base).ok_or(DriverError::NotRegistered)?;
        let at = DmaBuf { vaddr: buffer, bus, len: len as u64 };
        // The range is this port's memory before anything is allocated.
        self.read(&at, 0, &mut [])?;
        let mut out = vec![0u8; len as usize];
        self.read(&at, 0, &mut out)?;
        Ok(out)
    }

    /// Wait until the NIC serves this port (its firmware has seen the open
    /// and answered with PortOpened, which stays in the queue):
    /// `PortNotServed` if it did not within `timeout`. A message sent to a port the NIC
    /// does not serve yet fails (`SendStatus::TargetPortClosed`), so a
    /// receiver waits for this before telling its senders to go.
    /// `Port::attach` does it.
    pub fn wait_served(&mut self, timeout: Duration) -> Result<(), DriverError> {
        let start = self.be.now_ns();
        let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.start_wait(start);
        loop {
            if self.nic_serving() {
                return Ok(());
            }
            self.check_alive()?;
            if self.be.now_ns().saturating_sub(start) >= limit {
                return Err(DriverError::PortNotServed(self.num));
            }
            if !self.be.idle_wait() {
                return Err(DriverError::WouldBlock);
            }
        }
    }

    // ----- descriptors -----

    /// Send `len` bytes at `offset` in `buf` to (node, port) into a receive
    /// buffer of `size_class` and `priority`. Takes a send token.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        buf: &DmaBuf,
        offset: u64,
        len: u32,
        size_class: u8,
        priority: Priority,
        node: u16,
        port: u8,
        tag: u64,
    ) -> Result<(), DriverError> {
        let local = buf.vaddr_at(offset, len as u64)?;
        self.post_raw(Descriptor {
            kind: DescKind::Send,
            priority,
            size_class,
            target_port: port,
            target_node: node,
            local,
            len,
            remote: 0,
            tag,
        })
    }

    /// Give the NIC `buf` (all of it) as a receive buffer for messages of
    /// `size_class` and `priority`. Takes a receive token; the Received
    /// event carries `tag`.
    pub fn provide_receive_buffer(
        &mut self,
        buf: &DmaBuf,
        size_class: u8,
        priority: Priority,
        tag: u64,
    ) -> Result<(), DriverError> {
        let len = u32::try_from(buf.len).map_err(|_| DriverError::BadSize)?;
        self.post_raw(Descriptor {
            kind: DescKind::Provide,
            priority,
            size_class,
            target_port: 0,
            target_node: 0,
            local: buf.vaddr,
            len,
            remote: 0,
            tag,
        })
    }

    /// Write `len` bytes at `offset` in `buf` into (node, port)'s registered
    /// memory at `remote_vaddr`. Takes a send token.
    #[allow(clippy::too_many_arguments)]
    pub fn put(
        &mut self,
        buf: &DmaBuf,
        offset: u64,
        len: u32,
        node: u16,
        port: u8,
        remote_vaddr: u64,
        priority: Priority,
        tag: u64,
    ) -> Result<(), DriverError> {
        self.post_remote(DescKind::Put, buf, offset, len, node, port, remote_vaddr, priority, tag)
    }

    /// Read `len` bytes at `remote_vaddr` of (node, port) into `buf` at
    /// `offset`. Takes a send token.
    #[allow(clippy::too_many_arguments)]
    pub fn get(
        &mut self,
        buf: &DmaBuf,
        offset: u64,
        len: u32,
        node: u16,
        port: u8,
        remote_vaddr: u64,
        priority: Priority,
        tag: u64,
    ) -> Result<(), DriverError> {
        self.post_remote(DescKind::Get, buf, offset, len, node, port, remote_vaddr, priority, tag)
    }

    /// Post a put or get: `len` bytes at `offset` in `buf` against
    /// (node, port)'s memory at `remote_vaddr`.
    #[allow(clippy::too_many_arguments)]
    fn post_remote(
        &mut self,
        kind: DescKind,
        buf: &DmaBuf,
        offset: u64,
        len: u32,
        node: u16,
        port: u8,
        remote_vaddr: u64,
        priority: Priority,
        tag: u64,
    ) -> Result<(), DriverError> {
        let local = buf.vaddr_at(offset, len as u64)?;
        self.post_raw(Descriptor {
            kind,
            priority,
            size_class: 0,
            target_port: port,
            target_node: node,
            local,
            len,
            remote: remote_vaddr,
            tag,
        })
    }

    /// Resume this port's `priority` sends to (node, port) after a send
    /// there timed out. No token, no event.
    pub fn resume(&mut self, node: u16, port: u8, priority: Priority) -> Result<(), DriverError> {
        self.post_raw(Descriptor {
            kind: DescKind::Resume,
            priority,
            size_class: 0,
            target_port: port,
            target_node: node,
            local: 0,
            len: 0,
            remote: 0,
            tag: 0,
        })
    }

    /// Ask for an Alarm event carrying `tag` after `ticks` RTC ticks. No
    /// token; a new alarm replaces a pending one.
    pub fn set_alarm(&mut self, ticks: u64, tag: u64) -> Result<(), DriverError> {
        self.post_raw(Descriptor {
            kind: DescKind::Alarm,
            priority: Priority::Low,
            size_class: 0,
            target_port: 0,
            target_node: 0,
            local: 0,
            len: 0,
            remote: ticks,
            tag,
        })
    }

    /// Ask the NIC of `node` to answer a ping from this port's NIC (the
    /// echo offload: no host there takes part). One `Event::Echo` carrying
    /// `tag` comes back with the round trip in NIC clock ticks, or
    /// `SendStatus::Unreachable` when no answer came within the send
    /// timeout. No token. A firmware built without the echo offload
    /// refuses it with `ErrorCause::BadKind`.
    pub fn nic_echo(&mut self, node: u16, tag: u64) -> Result<(), DriverError> {
        self.post_raw(Descriptor::echo(node, tag))
    }

    /// Post any descriptor as given (negative tests: foreign or unregistered
    /// addresses, bad classes, bad targets). Only tokens and ring space are
    /// checked; the token of `d.kind` is taken.
    pub fn post_raw(&mut self, d: Descriptor) -> Result<(), DriverError> {
        let mut b = [0u8; DESC_SIZE as usize];
        d.encode(&mut b);
        self.post(&b, token_of(d.kind))?;
        if matches!(d.kind, DescKind::Send | DescKind::Put | DescKind::Get) {
            self.watch(d.target_node);
        }
        Ok(())
    }

    /// Post 64 raw descriptor bytes (malformed descriptors: bad kind,
    /// priority, reserved bits). Takes the token of the kind its kind byte
    /// names; a byte naming no kind takes a send token (as the firmware
    /// counts it; the Error event gives it back).
    pub fn post_raw_bytes(&mut self, bytes: &[u8; DESC_SIZE as usize]) -> Result<(), DriverError> {
        self.post(bytes, token_of_byte(Descriptor::raw_kind(bytes)))
    }

    fn post(&mut self, bytes: &[u8], token: TokenBack) -> Result<(), DriverError> {
        self.post_n(&[bytes], token)
    }

    /// Post a descriptor that spans `slots.len()` ring slots (a multicast
    /// and its child list): one send token, all slots or none.
    pub(crate) fn post_slots(
        &mut self,
        slots: &[[u8; DESC_SIZE as usize]],
    ) -> Result<(), DriverError> {
        let refs: Vec<&[u8]> = slots.iter().map(|s| &s[..]).collect();
        self.post_n(&refs, TokenBack::Send)
    }

    /// The number of group `g`'s next collective, and its posting.
    pub(crate) fn next_cseq(&self, g: u16) -> u32 {
        self.cseqs.get(g as usize).map_or(1, |c| c.wrapping_add(1).max(1))
    }

    pub(crate) fn commit_cseq(&mut self, g: u16, cseq: u32) {
        if let Some(c) = self.cseqs.get_mut(g as usize) {
            *c = cseq;
        }
    }

    pub(crate) fn post_n(&mut self, slots: &[&[u8]], token: TokenBack) -> Result<(), DriverError> {
        match token {
            TokenBack::Send if self.send_free == 0 => return Err(self.no_send_token()),
            TokenBack::Recv if self.recv_free == 0 => return Err(DriverError::NoRecvToken),
            _ => {}
        }
        if !self.ring_has_room(slots.len() as u32) {
            return Err(DriverError::RingFull);
        }
        let p = self.num as usize;
        for bytes in slots {
            self.be.sram_write(send_slot(p, self.prod), bytes);
            self.prod = self.prod.wrapping_add(1);
        }
        self.be.sram_store_u32(port_reg(p, pcb::SEND_PROD), self.prod);
        self.be.doorbell();
        self.be.charge(HostOp::PostDescriptor);
        match token {
            TokenBack::Send => self.send_free -= 1,
            TokenBack::Recv => self.recv_free -= 1,
            TokenBack::None => {}
        }
        self.stats.posted += 1;
        Ok(())
    }

    /// Would a send be posted now? The checks `send` makes before it
    /// writes anything: a send token free (`NoSendToken`) and a slot free
    /// in the ring (`RingFull`; like `send`, it reads SEND_CONS only when
    /// its cached view says full). A program that fills its message only
    /// when the send can go asks this first.
    pub fn send_room(&mut self) -> Result<(), DriverError> {
        if self.send_free == 0 {
            return Err(self.no_send_token());
        }
        if !self.ring_has_room(1) {
            return Err(DriverError::RingFull);
        }
        Ok(())
    }

    /// Descriptors posted that the NIC has not taken out of the send ring
    /// yet (it takes one once it can: e.g. once it has read the
    /// translations of a new buffer's pages). A program posts its first
    /// receive buffers and waits for them to be taken before its peers
    /// send to it.
    pub fn ring_pending(&mut self) -> u32 {
        if self.prod != self.cons_seen {
            self.ring_has_room(SEND_RING_LEN);
        }
        self.prod.wrapping_sub(self.cons_seen)
    }

    /// Send ring slots free now (SEND_CONS read when the cached view
    /// says fewer than `want` are).
    pub(crate) fn ring_free(&mut self, want: u32) -> u32 {
        self.ring_has_room(want);
        SEND_RING_LEN.saturating_sub(self.prod.wrapping_sub(self.cons_seen))
    }

    /// `NoSendToken`, and the program now waits for a send token: the
    /// next completion that brings one back is for `recv`, asked for or
    /// not.
    pub(crate) fn no_send_token(&mut self) -> DriverError {
        self.send_token_wanted = true;
        DriverError::NoSendToken
    }

    fn ring_has_room(&mut self, n: u32) -> bool {
        if self.prod.wrapping_sub(self.cons_seen) + n <= SEND_RING_LEN {
            return true;
        }
        let p = self.num as usize;
        if self.be.sram_load_u32(port_reg(p, pcb::FW_GENERATION)) == self.generation {
            let cons = self.be.sram_load_u32(port_reg(p, pcb::SEND_CONS));
            // Ignore a value that cannot be right (ahead of us).
            if self.prod.wrapping_sub(cons) <= SEND_RING_LEN {
                self.cons_seen = cons;
            }
        }
        self.prod.wrapping_sub(self.cons_seen) + n <= SEND_RING_LEN
    }

    // ----- events -----

    /// The next event, if the NIC has written one. Never blocks. Returns
    /// every event, PortOpened and unasked-for completions included (see
    /// `try_recv` for the program's events only).
    pub fn poll(&mut self) -> Option<Event> {
        self.next_event().map(|(e, _)| e)
    }

    /// The next event, and whether `recv` skips it (its quiet operation
    /// settled either way).
    fn next_event(&mut self) -> Option<(Event, bool)> {
        loop {
            let slot = self.consumed & (self.evq_len - 1);
            let at = self.evq_bus + slot as u64 * EVENT_SIZE as u64;
            let want = self.consumed.wrapping_add(1);
            if self.be.host_load_u32(at + EVENT_SEQ_OFFSET as u64) != want {
                self.be.charge(HostOp::EventEmpty);
                self.stats.empty_polls += 1;
                return None;
            }
            let mut rec = [0u8; EVENT_SIZE as usize];
            self.be.host_read(at, &mut rec);
            self.be.charge(HostOp::EventFound);
            self.consumed = want;
            self.stats.events += 1;
            if self.consumed.wrapping_sub(self.reported) >= self.evq_len / 2 {
                self.report_consumed();
            }
            // Tokens come back by the kind bytes, even if the rest is bad.
            let mut send_token = false;
            if let Some(kind) = EventKind::from_u8(rec[0]) {
                match token_back(kind, rec[12]) {
                    TokenBack::Send => {
                        self.send_free = (self.send_free + 1).min(self.send_max);
                        send_token = true;
                    }
                    TokenBack::Recv => self.recv_free = (self.recv_free + 1).min(self.recv_max),
                    TokenBack::None => {}
                }
            }
            let parsed = abi::Event::decode(&rec).ok();
            if let Some(p) = parsed.as_ref().filter(|p| p.kind == EventKind::McastLost) {
                // A piece of the lost heads of the multicast whose Sent
                // follows: kept for it, not returned.
                let heads = match self.lost.iter_mut().find(|(t, _)| *t == p.tag) {
                    Some((_, h)) => h,
                    None => {
                        self.lost.push((p.tag, Default::default()));
                        &mut self.lost.last_mut().expect("just pushed").1
                    }
                };
                heads.merge(p.len as usize, &p.inline);
                continue;
            }
            match parsed.as_ref().and_then(from_abi) {
                Some(mut e) => {
                    if let Event::Received { node, mcast, .. } = e {
                        self.watch(node);
                        if mcast.is_some_and(|m| m.scheme == crate::Scheme::Host.code()) {
                            self.be.charge(HostOp::McastReceive);
                        }
                    }
                    if let Event::Sent { tag, mcast: Some(ref mut m), .. } = e {
                        if let Some(i) = self.lost.iter().position(|(t, _)| *t == tag) {
                            m.lost = self.lost.swap_remove(i).1;
                        }
                    }
                    if let Event::Collective { tag, ref mut missing, .. } = e {
                        if let Some(i) = self.lost.iter().position(|(t, _)| *t == tag) {
                            *missing = self.lost.swap_remove(i).1;
                        }
                    }
                    // Settle a quiet operation either way; a completion
                    // that ends a wait for a send token is returned.
                    let skip = self.quiet.skip(&e);
                    let wanted = send_token && std::mem::take(&mut self.send_token_wanted);
                    return Some((e, skip && !wanted));
                }
                None => self.stats.bad_events += 1,
            }
        }
    }

    /// Append up to `max` events to `out`; returns how many.
    pub fn poll_batch(&mut self, out: &mut Vec<Event>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.poll() {
                Some(e) => {
                    out.push(e);
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Block until an event arrives or `timeout` (backend time) passes.
    /// On a backend that cannot block (the sim) an empty queue gives
    /// `WouldBlock` at once.
    pub fn wait(&mut self, timeout: Duration) -> Result<Event, DriverError> {
        self.wait_for(timeout, Port::poll)
    }

    /// Wait on several ports at once: the next event for the program
    /// (what [`recv`](Port::recv) returns) on any of `ports`, with the
    /// index of the port it came from, or `Timeout` if none came within
    /// `timeout`. For a thread that serves several ports (a sending and a
    /// receiving one, say): a wait on one port alone lasts its whole
    /// timeout while the others have events. The ports are looked at in
    /// the order given, each pass; a caller that wants every port served
    /// in turn under load rotates the list (`ports.rotate_left(1)`). A
    /// port whose NIC went down ends the wait with its error, as `recv`
    /// would. No port: `Timeout` at once (nothing can come). On a backend
    /// that cannot block (the sim) nothing there is `WouldBlock` at once.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use host_driver::{DriverError, Event, Port};
    ///
    /// # fn main() -> Result<(), DriverError> {
    /// let mut tx = Port::attach("nic", 0, 1)?;
    /// let mut rx = Port::attach("nic", 1, 1)?;
    /// match Port::recv_any(&mut [&mut tx, &mut rx], Duration::from_millis(100)) {
    ///     Ok((0, e)) => println!("the sender: {e:?}"),
    ///     Ok((_, e @ Event::Received { .. })) => println!("{} bytes", rx.read_message(&e)?.len()),
    ///     Ok((_, e)) => println!("the receiver: {e:?}"),
    ///     Err(DriverError::Timeout) => println!("nothing on either for 100 ms"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub fn recv_any(
        ports: &mut [&mut Port<B>],
        timeout: Duration,
    ) -> Result<(usize, Event), DriverError> {
        let Some(first) = ports.first() else {
            return Err(DriverError::Timeout);
        };
        let be = first.be.clone();
        let start = be.now_ns();
        let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        for p in ports.iter_mut() {
            p.start_wait(start);
        }
        loop {
            for (i, p) in ports.iter_mut().enumerate() {
                if let Some(e) = p.try_recv() {
                    return Ok((i, e));
                }
            }
            for p in ports.iter_mut() {
                p.report_consumed();
                p.check_alive()?;
            }
            if be.now_ns().saturating_sub(start) >= limit {
                return Err(DriverError::Timeout);
            }
            if !be.idle_wait() {
                return Err(DriverError::WouldBlock);
            }
        }
    }

    /// A wait begins at `start`: the heartbeat is measured from here.
    fn start_wait(&mut self, start: u64) {
        self.heartbeat =
            (self.be.sram_load_u32(port_reg(self.num as usize, pcb::HEARTBEAT)), start);
    }

    /// Block until `next` gives an event or `timeout` passes.
    fn wait_for(
        &mut self,
        timeout: Duration,
        next: fn(&mut Port<B>) -> Option<Event>,
    ) -> Result<Event, DriverError> {
        let start = self.be.now_ns();
        let limit = u64::try_from(timeout.as_nanos()).unwrap_or(u64::MAX);
        self.start_wait(start);
        loop {
            if let Some(e) = next(self) {
                return Ok(e);
            }
            self.report_consumed();
            self.check_alive()?;
            if self.be.now_ns().saturating_sub(start) >= limit {
                return Err(DriverError::Timeout);
            }
            if !self.be.idle_wait() {
                return Err(DriverError::WouldBlock);
            }
        }
    }

    /// Is the NIC alive, and the NICs this port talks with? On a backend
    /// whose device beats (`HEARTBEAT`, real-time clusters):
    /// - a heartbeat still for `HEARTBEAT_DEAD_MS` whose device process
    ///   is gone is `NicDown { why: DeviceProcess }`;
    /// - this port closed by its NIC (a reset) is `NicReset`, its
    ///   firmware halted or its QEMU gone `NicDown` (each naming this
    ///   node), and every later check says the same at once;
    /// - a watched peer (`watch`) reset is `PeerReset`, gone `NicDown`
    ///   naming it, once per change;
    /// - a port the firmware refused (its window rewritten behind the
    ///   driver's back) is `PortRefused`.
    ///
    /// Waits call it; a program that polls on its own may too. Cheap: a
    /// few loads from the port's window, no system call (but one, to see
    /// whether the device process lives, after a still heartbeat).
    pub fn check_alive(&mut self) -> Result<(), DriverError> {
        if !self.be.has_heartbeat() {
            return Ok(());
        }
        if let Some(e) = &self.news.down {
            return Err(e.clone());
        }
        let node = self.node;
        let now = self.be.now_ns();
        let hb = self.be.sram_load_u32(port_reg(self.num as usize, pcb::HEARTBEAT));
        if hb != self.heartbeat.0 || self.heartbeat.1 == 0 {
            self.heartbeat = (hb, now);
        } else if now.saturating_sub(self.heartbeat.1) >= pcb::HEARTBEAT_DEAD_MS * 1_000_000 {
            if !self.be.device_alive() {
                return Err(self.gone(DriverError::NicDown { node, why: DownCause::DeviceProcess }));
            }
            // Alive but late (a busy machine): look again a while later.
            self.heartbeat.1 = now;
        }
        if self.closed_by_nic() {
            return Err(self.gone(DriverError::NicReset { node }));
        }
        self.check_news()?;
        // The device's copy of FW_STATUS in the window (a host process
        // maps no register).
        if self.be.sram_load_u32(port_reg(self.num as usize, pcb::NIC_STATUS))
            == nic_abi::regs::FW_HALTED
        {
            let why = match pcb::node_state(self.node_entry(node as usize)) {
                pcb::NODE_GONE => DownCause::Qemu,
                _ => DownCause::Firmware,
            };
            return Err(self.gone(DriverError::NicDown { node, why }));
        }
        if self.be.sram_load_u32(port_reg(self.num as usize, pcb::FW_STATE)) == pcb::STATE_REFUSED {
            return Err(DriverError::PortRefused(self.num));
        }
        Ok(())
    }

    /// A wait for the NIC found the device process gone.
    pub(crate) fn mark_device_gone(&mut self) {
        let node = self.node;
        self.gone(DriverError::NicDown { node, why: DownCause::DeviceProcess });
    }

    /// This port's NIC is gone (`e`): every later check says so at once.
    fn gone(&mut self, e: DriverError) -> DriverError {
        self.news.down = Some(e.clone());
        e
    }

    /// Why this port's NIC is known to be gone (a wait reported it), if
    /// it is: then no wait, registration change or close waits for it.
    pub fn down(&self) -> Option<&DriverError> {
        self.news.down.as_ref()
    }

    /// Write EVQ_CONSUMED now if it is behind (poll does it in batches).
    pub fn report_consumed(&mut self) {
        if self.reported != self.consumed {
            self.be.sram_store_u32(port_reg(self.num as usize, pcb::EVQ_CONSUMED), self.consumed);
            self.reported = self.consumed;
            self.stats.consumed_writes += 1;
        }
    }
}

impl<B: NicBackend> Drop for Port<B> {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn pick_tokens(opt: Option<u32>, nic: u32, name: &'static str) -> Result<u32, DriverError> {
    match opt {
        None => Ok(nic),
        Some(n) if n >= 1 && n <= nic => Ok(n),
        Some(_) => Err(DriverError::InvalidOption(name)),
    }
}

/// All of `buf` as one message's length (a send, put or get moves the
/// whole buffer): longer than a u32 is too long.
fn whole_len(buf: &DmaBuf) -> Result<u32, DriverError> {
    u32::try_from(buf.len).map_err(|_| DriverError::MessageTooLong { len: buf.len })
}
