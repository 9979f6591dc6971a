//! Collectives run by the NICs: barrier, reduce, allreduce and broadcast
//! over a [`Group`] (the multicast groups' definition: members in rank
//! order, all on one port, installed in each member's NIC with
//! [`Nic::create_group`](crate::Nic::create_group)).
//!
//! Every member's program makes the same calls in the same order. Each
//! call posts one descriptor and returns at once with the collective's
//! number in its group (1, 2, 3, ... per port); the member's part is done
//! when its [`Event::Collective`](crate::Event::Collective) with that
//! number comes. Meanwhile the NIC runs the whole algorithm: it reads
//! the member's vector, sends, receives and combines chunk by chunk, and
//! writes the result.
//!
//! ```no_run
//! use host_driver::collective::{Collective, Op, Dtype};
//! use host_driver::{Algorithm, Event, Group, LiveBackend, Nic, PortOptions, SendStatus};
//!
//! # fn main() -> Result<(), host_driver::DriverError> {
//! // Node 0 of the cluster "nic", port 2 (every member runs the same).
//! let nic = Nic::open(LiveBackend::attach("nic", 0, 2)?)?;
//! let group = Group::new(1, 2, (0..16).collect())?;
//! nic.create_group(&group, Algorithm::Binomial)?;
//! let mut port = nic.open_port(2, PortOptions::default())?;
//! let v = port.alloc(8 * 128)?; // 128 f64 per member
//! let cseq = port.allreduce(&group, Op::Sum, Dtype::F64, &v)?;
//! loop {
//!     if let Event::Collective { cseq: done, status, .. } = port.recv()? {
//!         assert_eq!((done, status), (cseq, SendStatus::Ok));
//!         break; // the sums are in `v` at every member
//!     }
//! }
//! let _ = port.collective(&Collective::barrier(&group))?;
//! # Ok(())
//! # }
//! ```
//!
//! **Assisted.** With [`Collective::assisted`] set, the host starts each
//! step and the NIC does the rest of it: `Port::collective` releases
//! step 0, the NIC takes every chunk through it (sends, receives,
//! combines, acknowledgements) and posts an
//! [`Event::CollStep`](crate::Event::CollStep); the host releases the
//! next with [`Port::collective_step`], and so on up to the last of its
//! [`Port::collective_steps`], which ends with `Event::Collective`. Not
//! with the ring (its steps depend on the chunk; [`auto_assisted`] picks
//! among the others), and at most [`max_assisted_len`] bytes.
//!
//! ```no_run
//! use host_driver::collective::{Collective, Dtype, Kind, Op};
//! use host_driver::{Algorithm, Event, Group, LiveBackend, Nic, PortOptions};
//!
//! # fn main() -> Result<(), host_driver::DriverError> {
//! let nic = Nic::open(LiveBackend::attach("nic", 0, 2)?)?;
//! let group = Group::new(1, 2, (0..8).collect())?;
//! nic.create_group(&group, Algorithm::Binomial)?;
//! let mut port = nic.open_port(2, PortOptions::default())?;
//! let v = port.alloc(8 * 16)?;
//! let c = Collective {
//!     assisted: true,
//!     ..Collective::reduction(&group, Kind::Allreduce, Op::Sum, Dtype::F64, &v)
//! };
//! let steps = port.collective_steps(&c)?;
//! let cseq = port.collective(&c)?; // step 0
//! loop {
//!     match port.recv()? {
//!         Event::CollStep { cseq: k, step, .. } if k == cseq && step + 1 < steps => {
//!             // (the host's own work for the step goes here)
//!             port.collective_step(&c, cseq, step + 1)?;
//!         }
//!         Event::Collective { cseq: k, .. } if k == cseq => break,
//!         _ => {}
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The order of combination is the algorithm's and the same at every
//! member (`nic_abi::collective::schedule` documents it), so floating
//! point results are bit-identical at every member and from run to run;
//! [`reference`] computes them on the host.

pub use nic_abi::collective::reference;
pub use nic_abi::collective::{Alg, Dtype, Kind, Op};

pub mod model;

use nic_abi::collective::{CollFields, Shape};
use nic_abi::desc::DESC_SIZE;

use crate::backend::NicBackend;
use crate::event::TokenBack;
use crate::memory::DmaBuf;
use crate::multicast::Group;
use crate::port::Port;
use crate::DriverError;

/// One collective, as a member asks for it.
#[derive(Debug, Clone, Copy)]
pub struct Collective<'a> {
    pub group: &'a Group,
    pub kind: Kind,
    /// None: the default for the kind and the vector ([`auto`]).
    pub algorithm: Option<Alg>,
    /// Reductions: the operation and the element type.
    pub op: Op,
    pub dtype: Dtype,
    /// Reduce and broadcast: the root's rank.
    pub root: u16,
    /// This member's vector (none for a barrier; a broadcast's non-roots
    /// receive into it).
    pub data: Option<&'a DmaBuf>,
    /// Where the result goes (None: over `data`).
    pub result: Option<&'a DmaBuf>,
    /// Returned in the event.
    pub tag: u64,
    /// Assisted: the host releases each step ([`Port::collective_step`]),
    /// the NIC does the rest of it (not with the ring; at most
    /// [`max_assisted_len`] bytes).
    pub assisted: bool,
}

impl<'a> Collective<'a> {
    /// A barrier of `group`.
    pub fn barrier(group: &'a Group) -> Collective<'a> {
        Collective {
            group,
            kind: Kind::Barrier,
            algorithm: None,
            op: Op::Sum,
            dtype: Dtype::U64,
            root: 0,
            data: None,
            result: None,
            tag: 0,
            assisted: false,
        }
    }

    /// A reduction (`Kind::Reduce` or `Kind::Allreduce`) of `data`.
    pub fn reduction(group: &'a Group, kind: Kind, op: Op, dtype: Dtype, data: &'a DmaBuf) -> Self {
        Collective { kind, op, dtype, data: Some(data), ..Collective::barrier(group) }
    }
}

/// The algorithm picked when none is given: dissemination for a barrier,
/// recursive doubling for an allreduce of up to 4 chunks and the
/// pipelined ring above, a binomial tree for reduce and broadcast.
pub fn auto(kind: Kind, chunks: u32) -> Alg {
    match kind {
        Kind::Barrier => Alg::Dissemination,
        Kind::Allreduce if chunks <= 4 => Alg::Pairwise,
        Kind::Allreduce => Alg::Ring,
        Kind::Reduce | Kind::Broadcast => Alg::Binomial,
    }
}

/// The algorithm picked when none is given to an assisted collective:
/// as [`auto`], but recursive doubling for every allreduce (the ring
/// cannot run assisted, and an assisted vector is short).
pub fn auto_assisted(kind: Kind) -> Alg {
    match kind {
        Kind::Allreduce => Alg::Pairwise,
        k => auto(k, 1),
    }
}

/// The longest vector of an assisted collective of `kind` (elements of
/// `t`) on a fabric of MTU `mtu` whose NICs have `sram` bytes of SRAM:
/// `nic_abi::collective::MAX_ASSISTED_CHUNKS` chunks.
pub fn max_assisted_len(kind: Kind, t: Dtype, mtu: u32, sram: u32) -> u32 {
    let chunk = nic_abi::collective::chunk_bytes(mtu, sram, nic_abi::collective::unit(kind, t));
    chunk * nic_abi::collective::MAX_ASSISTED_CHUNKS
}

/// The algorithm picked when none is given, for a vector of `len` bytes
/// of elements of `t` on a fabric of MTU `mtu` whose NICs have `sram`
/// bytes of SRAM ([`auto`] of its chunks).
pub fn auto_for(kind: Kind, t: Dtype, len: u32, mtu: u32, sram: u32) -> Alg {
    auto(kind, nic_abi::collective::chunks_of(kind, t, len, mtu, sram))
}

impl<B: NicBackend> Port<B> {
    /// Start this member's part of collective `c`: its number in the
    /// group (the `cseq` of its `Event::Collective`). Errors: the group
    /// is on another port or this node is not in it, a root outside it,
    /// a vector missing, empty, not whole elements or longer than the
    /// NICs take (`collective::max_len`: 4,095 chunks; assisted:
    /// [`max_assisted_len`]), an algorithm that does not do the kind (or
    /// the ring assisted), the ring full. Assisted, this releases step 0
    /// too.
    pub fn collective(&mut self, c: &Collective<'_>) -> Result<u32, DriverError> {
        let cseq = self.next_cseq(c.group.id());
        self.post_collective(c, cseq, 0)?;
        self.commit_cseq(c.group.id(), cseq);
        for &m in c.group.members() {
            self.watch(m);
        }
        Ok(cseq)
    }

    /// Release step `step` (1 and on, one at a time, each after the
    /// `Event::CollStep` of the step before) of assisted collective `cseq`,
    /// begun by `collective(c)` with the same `c` (its `tag` may differ:
    /// it comes back in the step's event). The NIC refuses a step out of
    /// order with `ErrorCause::BadStep`; a step of a collective that has
    /// ended here (members missing) is taken and does nothing.
    pub fn collective_step(
        &mut self,
        c: &Collective<'_>,
        cseq: u32,
        step: u16,
    ) -> Result<(), DriverError> {
        if !c.assisted || step == 0 {
            return Err(DriverError::BadCollective("steps are released in assisted collectives"));
        }
        if step >= self.collective_steps(c)? {
            return Err(DriverError::BadCollective("past this member's last step"));
        }
        self.post_collective(c, cseq, step)
    }

    /// How many steps this member of collective `c` takes (the steps of
    /// `nic_abi::collective::schedule` for its rank): an assisted
    /// collective's member releases steps 0 to this less one.
    pub fn collective_steps(&self, c: &Collective<'_>) -> Result<u16, DriverError> {
        let f = self.collective_fields(c, 0, 0)?;
        let rank = c.group.rank_of(self.node).unwrap_or(0);
        let shape = Shape { kind: f.kind, alg: f.alg, n: c.group.size(), rank, root: f.root };
        Ok(shape.steps(0).len() as u16)
    }

    fn post_collective(
        &mut self,
        c: &Collective<'_>,
        cseq: u32,
        step: u16,
    ) -> Result<(), DriverError> {
        let f = self.collective_fields(c, cseq, step)?;
        let mut b = [0u8; DESC_SIZE as usize];
        f.encode(&mut b);
        self.post_n(&[&b[..]], TokenBack::None)
    }

    /// The descriptor of collective `c`, number `cseq`, step `step`.
    fn collective_fields(
        &self,
        c: &Collective<'_>,
        cseq: u32,
        step: u16,
    ) -> Result<CollFields, DriverError> {
        let g = c.group;
        if g.port() != self.number() {
            return Err(DriverError::BadGroup("the group is on another port"));
        }
        if g.rank_of(self.node).is_none() {
            return Err(DriverError::BadGroup("this node is not a member"));
        }
        if c.root >= g.size() {
            return Err(DriverError::BadCollective("the root is not a member's rank"));
        }
        let elem = nic_abi::collective::unit(c.kind, c.dtype);
        let (local, len) = match (c.kind.has_data(), c.data) {
            (false, _) => (0, 0),
            (true, None) => return Err(DriverError::BadCollective("no vector")),
            (true, Some(d)) => (d.vaddr, d.len),
        };
        if c.kind.has_data() && (len == 0 || !len.is_multiple_of(elem as u64)) {
            return Err(DriverError::BadCollective("a vector of no elements, or of part of one"));
        }
        if c.kind.combines() && !c.op.applies_to(c.dtype) {
            return Err(DriverError::BadCollective(
                "a bitwise operation of floating-point elements",
            ));
        }
        let mtu = self.backend().sram_load_u32(nic_abi::regs::reg(nic_abi::regs::MTU));
        let sram = self.backend().sram_load_u32(nic_abi::regs::reg(nic_abi::regs::SRAM_SIZE));
        if len > nic_abi::collective::max_len(c.kind, c.dtype, mtu, sram) as u64 {
            return Err(DriverError::BadCollective(
                "a vector of more chunks than the NICs take (4,095)",
            ));
        }
        if c.assisted && len > max_assisted_len(c.kind, c.dtype, mtu, sram) as u64 {
            return Err(DriverError::BadCollective(
                "an assisted vector of more chunks than the NICs take (8)",
            ));
        }
        let nchunks = nic_abi::collective::chunks_of(c.kind, c.dtype, len as u32, mtu, sram);
        let alg = c.algorithm.unwrap_or(match c.assisted {
            true => auto_assisted(c.kind),
            false => auto(c.kind, nchunks),
        });
        if !alg.serves(c.kind) {
            return Err(DriverError::BadCollective("the algorithm does not do this collective"));
        }
        if c.assisted && alg == Alg::Ring {
            return Err(DriverError::BadCollective(
                "the ring cannot run assisted: its steps depend on the chunk",
            ));
        }
        let remote = match c.result {
            Some(r) if r.len < len => {
                return Err(DriverError::BadCollective("a result buffer shorter than the vector"))
            }
            Some(r) => r.vaddr,
            None => local,
        };
        let step = u8::try_from(step)
            .map_err(|_| DriverError::BadCollective("past this member's last step"))?;
        Ok(CollFields {
            kind: c.kind,
            port: g.port(),
            group: g.id(),
            local,
            len: len as u32,
            cseq,
            remote,
            tag: c.tag,
            op: c.op,
            dtype: c.dtype,
            alg,
            root: c.root,
            assisted: c.assisted,
            step,
        })
    }

    /// A barrier of `group` (the default algorithm).
    pub fn barrier(&mut self, group: &Group) -> Result<u32, DriverError> {
        self.collective(&Collective::barrier(group))
    }

    /// Reduce `buf` (elements of `dtype`) at every member to the root of
    /// rank `root`, in place there.
    pub fn reduce(
        &mut self,
        group: &Group,
        root: u16,
        op: Op,
        dtype: Dtype,
        buf: &DmaBuf,
    ) -> Result<u32, DriverError> {
        let c = Collective { root, ..Collective::reduction(group, Kind::Reduce, op, dtype, buf) };
        self.collective(&c)
    }

    /// Allreduce `buf` (elements of `dtype`): every member's `buf` ends
    /// holding the combination of all of them.
    pub fn allreduce(
        &mut self,
        group: &Group,
        op: Op,
        dtype: Dtype,
        buf: &DmaBuf,
    ) -> Result<u32, DriverError> {
        self.collective(&Collective::reduction(group, Kind::Allreduce, op, dtype, buf))
    }
}
