//! [`Work`]: what one pass of the MCP did, in units a simulator prices
//! (descriptors, packets, host-DMA commands, events, timers and the
//! offloads' own units). The image sums it with its instruction counter
//! (feature `poll-stats`); the simulator charges NIC CPU time for it.

/// What one `poll` did. (8-aligned: zeroing it after a busy pass is
/// seven word stores in the image, not a call to `memset`.)
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct Work {
    /// Send-ring descriptors taken and validated.
    pub descriptors: u32,
    /// Packets handed to the send-DMA engine.
    pub tx_packets: u32,
    /// Received packets examined.
    pub rx_packets: u32,
    /// Host-DMA commands posted.
    pub dma_cmds: u32,
    /// Events composed.
    pub events: u32,
    /// Timers handled.
    pub timers: u32,
    /// Rate control's own work, in flow-table words read or written and
    /// streams compared: a dispatched packet's NDT and flow counters (5),
    /// a flow-table rescan (on FLOW_GEN and when a stream is first used:
    /// one key word per entry, the IDT of each stream's flow), each stream
    /// the NDT scheduler compares. With no flow entries only the rescans
    /// remain, once per new stream.
    pub flow_ops: u32,
    /// Multicast tree work: children of a tree the NIC computed itself
    /// (the NIC-based scheme, per message), or relayed packets it set up.
    pub tree_ops: u32,
    /// Multicast steps the NIC served itself, by algorithm code (a relay
    /// or root with children computing its share of the tree; separate
    /// addressing: one per destination). The study's NIC-based scheme
    /// spent most of its time here; the profile prices each algorithm.
    pub relay_steps: [u16; 4],
    /// Packets of a NIC-served multicast (not the host scheme's) sent:
    /// the multicast header built besides the data.
    pub mcast_packets: u32,
    /// Packets of a multicast sent to a further child of the same sender
    /// (the packet went to an earlier child already: only its destination
    /// and sequence change), by algorithm as `relay_steps`. The published
    /// model charges a tree's further children nothing on the deepest
    /// path and separate addressing a full send per destination: the
    /// profile prices each algorithm's.
    pub mcast_further: [u16; 4],
    /// Packets of a multicast received into a multicast record: the
    /// header and the record read besides the data.
    pub mcast_rx_packets: u32,
    /// Multicast descriptors taken (root, assisted relay), and multicast
    /// messages delivered to the host, of the NIC-served schemes.
    pub mcast_descs: u32,
    pub mcast_deliveries: u32,
    /// Elements an offload combined (a collective's reduction): integer
    /// ones, and floating-point ones (software arithmetic on a NIC CPU
    /// without a floating-point unit). The profile prices each.
    pub coll_elements: u32,
    pub coll_float_elements: u32,
}

impl Work {
    pub fn is_idle(&self) -> bool {
        // Field by field, the fields a busy pass most often moves first:
        // a pass that did work answers after a load or two.
        let Work {
            descriptors,
            tx_packets,
            rx_packets,
            dma_cmds,
            events,
            timers,
            flow_ops,
            tree_ops,
            relay_steps,
            mcast_packets,
            mcast_further,
            mcast_rx_packets,
            mcast_descs,
            mcast_deliveries,
            coll_elements,
            coll_float_elements,
        } = *self;
        if dma_cmds != 0 || rx_packets != 0 || tx_packets != 0 || descriptors != 0 {
            return false;
        }
        // The arrays one element at a time (an iterator over both went
        // through the stack in the image).
        let [r0, r1, r2, r3] = relay_steps;
        let [f0, f1, f2, f3] = mcast_further;
        let arrays = r0 | r1 | r2 | r3 | f0 | f1 | f2 | f3;
        (events
            | timers
            | flow_ops
            | tree_ops
            | mcast_packets
            | mcast_rx_packets
            | mcast_descs
            | mcast_deliveries
            | coll_elements
            | coll_float_elements
            | arrays as u32)
            == 0
    }

    pub fn add(&mut self, o: &Work) {
        self.descriptors += o.descriptors;
        self.tx_packets += o.tx_packets;
        self.rx_packets += o.rx_packets;
        self.dma_cmds += o.dma_cmds;
        self.events += o.events;
        self.timers += o.timers;
        self.flow_ops += o.flow_ops;
        self.tree_ops += o.tree_ops;
        for (a, b) in self.relay_steps.iter_mut().zip(o.relay_steps) {
            *a += b;
        }
        self.mcast_packets += o.mcast_packets;
        for (a, b) in self.mcast_further.iter_mut().zip(o.mcast_further) {
            *a += b;
        }
        self.mcast_rx_packets += o.mcast_rx_packets;
        self.mcast_descs += o.mcast_descs;
        self.mcast_deliveries += o.mcast_deliveries;
        self.coll_elements += o.coll_elements;
        self.coll_float_elements += o.coll_float_elements;
    }
}
