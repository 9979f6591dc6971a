//! Multicast through the driver on a simulated cluster running the real
//! MCP: every scheme x algorithm delivers each message exactly once,
//! intact and in order to every member, and the root hears of it; a
//! member that cannot be reached is reported, not waited for.

mod sim_rig;

use std::collections::HashMap;

use host_driver::nic_abi::event::McastInfo;
use host_driver::*;
use nic_emu::SimBackend;
use sim_rig::*;

const PORT: u8 = 1;
const BUFS: usize = 8;

/// One member: its NIC, port and receive buffers.
struct Member {
    node: u16,
    port: Port<SimBackend>,
    bufs: Vec<DmaBuf>,
    /// Buffers lent to relay sends: mseq -> (vaddr, sends outstanding).
    lent: HashMap<u32, (u64, u32)>,
    /// Multicasts received: mseq in arrival order.
    got: Vec<u32>,
    /// The root's completions: (mseq tag, status, unreached), and the
    /// virtual time each was taken (within a step of its coming).
    done: Vec<(u64, SendStatus, u16)>,
    done_at: Vec<u64>,
    /// The heads of the subtrees the root's completions named lost.
    lost: Vec<u16>,
    /// The members each completion says were not reached (`Group::not_reached`).
    not_reached: Vec<host_driver::NotReached>,
    bad: Vec<String>,
}

struct Case {
    rig: Rig,
    group: Group,
    members: Vec<Member>,
    class: u8,
    len: u32,
}

fn payload(mseq: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(mseq as u8)).collect()
}

impl Case {
    fn new(nodes: usize, g: &[u16], cached: Algorithm, len: u32, profile: &str) -> Case {
        Case::with_timeout(nodes, g, cached, len, profile, None)
    }

    /// [`Case::new`] with the firmware's send timeout set.
    fn with_timeout(
        nodes: usize,
        g: &[u16],
        cached: Algorithm,
        len: u32,
        profile: &str,
        send_timeout_ns: Option<u64>,
    ) -> Case {
        Case::starving(nodes, g, cached, len, profile, send_timeout_ns, &[])
    }

    /// [`Case::with_timeout`] with the members `starved` given no receive
    /// buffers.
    fn starving(
        nodes: usize,
        g: &[u16],
        cached: Algorithm,
        len: u32,
        profile: &str,
        send_timeout_ns: Option<u64>,
        starved: &[u16],
    ) -> Case {
        let cfg = Config {
            node: 0,
            nodes,
            send_tokens: 32,
            recv_tokens: 16,
            send_timeout_ns,
            ..Config::default()
        };
        let rig = Rig::with_profile(cfg, profile);
        let group = Group::new(3, PORT, g.to_vec()).unwrap();
        let class = host_driver::nic_abi::size_class_for(len as u64);
        let mut members = Vec::new();
        for &n in g {
            let nic = rig.nic_of(n as usize);
            nic.create_group(&group, cached).unwrap();
            let mut port = nic.open_port(PORT, PortOptions::default()).unwrap();
            let bufs: Vec<DmaBuf> =
                (0..BUFS).map(|_| port.alloc(1u64 << class.max(12)).unwrap()).collect();
            for (i, b) in bufs.iter().enumerate().filter(|_| !starved.contains(&n)) {
                port.provide_receive_buffer(b, class, Priority::Low, i as u64).unwrap();
            }
            members.push(Member {
                node: n,
                port,
                bufs,
                lent: HashMap::new(),
                got: Vec::new(),
                done: Vec::new(),
                done_at: Vec::new(),
                lost: Vec::new(),
                not_reached: Vec::new(),
                bad: Vec::new(),
            });
        }
        Case { rig, group, members, class, len }
    }

    /// Take every member's events: check and count receptions, relay for
    /// the host and assisted schemes, give buffers back.
    fn drain(&mut self) {
        let len = self.len;
        let now = self.rig.c.now_ns();
        for m in &mut self.members {
            while let Some(ev) = m.port.poll() {
                match ev {
                    Event::Received { buffer, len: got, mcast: Some(info), .. } => {
                        let McastInfo { mseq, .. } = info;
                        let b = *m.bufs.iter().find(|b| b.vaddr == buffer).unwrap();
                        let mut data = vec![0u8; got as usize];
                        m.port.read(&b, 0, &mut data).unwrap();
                        if got != len || data != payload(mseq, len) {
                            m.bad.push(format!("node {} mseq {mseq}: content", m.node));
                        }
                        m.got.push(mseq);
                        match m.port.relay(&ev, &self.group, &b, self.class, mseq as u64).unwrap() {
                            Relayed::Posted { descriptors } => {
                                m.lent.insert(mseq, (b.vaddr, descriptors));
                            }
                            Relayed::Nothing => m
                                .port
                                .provide_receive_buffer(&b, self.class, Priority::Low, 0)
                                .unwrap(),
                        }
                    }
                    Event::Sent { tag, status, mcast: Some(info), .. }
                        if m.node == self.group.root() && tag >= 1 << 32 =>
                    {
                        m.done.push((tag - (1 << 32), status, info.unreached));
                        m.done_at.push(now);
                        m.lost.extend(info.lost.iter());
                        m.not_reached.push(self.group.not_reached(&info));
                    }
                    Event::Sent { tag, status, .. } => {
                        // A relay's send from a receive buffer (tagged with
                        // the mseq): when all are back, the buffer is
                        // posted again.
                        if status != SendStatus::Ok {
                            m.bad.push(format!("node {}: relay send {status:?}", m.node));
                        }
                        let mseq = tag as u32;
                        let Some(e) = m.lent.get_mut(&mseq) else {
                            m.bad.push(format!("node {}: a Sent for nothing lent", m.node));
                            continue;
                        };
                        e.1 -= 1;
                        if e.1 == 0 {
                            let v = e.0;
                            m.lent.remove(&mseq);
                            let b = *m.bufs.iter().find(|b| b.vaddr == v).unwrap();
                            m.port
                                .provide_receive_buffer(&b, self.class, Priority::Low, 0)
                                .unwrap();
                        }
                    }
                    Event::PortOpened { .. } => {}
                    other => m.bad.push(format!("node {}: unexpected {other:?}", m.node)),
                }
            }
        }
    }

    /// Multicast `count` messages one after another from the root.
    fn run(&mut self, scheme: Scheme, alg: Algorithm, count: u32) {
        let root = self.group.root() as usize;
        let src = self.members[0].port.alloc(self.len.max(1) as u64).unwrap();
        for mseq in 0..count {
            let r = &mut self.members[0];
            r.port.write(&src, 0, &payload(mseq, self.len)).unwrap();
            let before = r.done.len();
            let posted = r
                .port
                .multicast(&Multicast {
                    buf: &src,
                    offset: 0,
                    len: self.len,
                    size_class: self.class,
                    priority: Priority::Low,
                    group: &self.group,
                    scheme,
                    algorithm: alg,
                    mseq,
                    tag: (1 << 32) + mseq as u64,
                })
                .unwrap();
            let _ = root;
            // Until every member has it and the root heard back.
            let want = if scheme == Scheme::Host { posted as usize } else { 1 };
            for _ in 0..400 {
                self.rig.step();
                self.drain();
                let all = self.members[1..].iter().all(|m| m.got.len() > mseq as usize);
                if all && self.members[0].done.len() >= before + want {
                    break;
                }
            }
        }
    }

    fn check(&self, scheme: Scheme, count: u32, what: &str) {
        let root = &self.members[0];
        let per = if scheme == Scheme::Host { 0 } else { 1 };
        if per == 1 {
            assert_eq!(root.done.len(), count as usize, "{what}: one completion per multicast");
        } else {
            assert!(root.done.len() >= count as usize, "{what}: the root's sends completed");
        }
        let stat = |s| -> u64 {
            self.members.iter().map(|m| self.rig.nic_of(m.node as usize).stat(s)).sum()
        };
        use host_driver::nic_abi::stats::Stat;
        let reports = stat(Stat::McastReports);
        let forwarded = stat(Stat::McastForwarded);
        let g = self.group.size() as u64 - 1;
        match scheme {
            Scheme::Host => assert_eq!((reports, forwarded), (0, 0), "{what}"),
            _ => assert_eq!(reports, g * count as u64, "{what}: one report per member"),
        }
        let want: Vec<u32> = (0..count).collect();
        for m in &self.members {
            assert!(m.bad.is_empty(), "{what}: {:?}", m.bad);
            if m.node != self.group.root() {
                assert_eq!(m.got, want, "{what}: node {} got each exactly once, in order", m.node);
            }
        }
        assert!(
            root.done.iter().all(|&(_, s, u)| s == SendStatus::Ok && u == 0),
            "{what}: the root's completions {:?}",
            root.done
        );
    }
}

fn algorithms() -> Vec<Algorithm> {
    vec![
        Algorithm::Separate,
        Algorithm::Serial,
        Algorithm::Binomial,
        Algorithm::Binary,
        Algorithm::KBinomial { k: 3 },
    ]
}

#[test]
fn every_scheme_and_algorithm_delivers_each_small_message_once_in_order() {
    let g: Vec<u16> = (0..8).collect();
    for scheme in Scheme::ALL {
        for alg in algorithms() {
            let mut c = Case::new(8, &g, alg, 2, "lanai9-gm");
            c.run(scheme, alg, 5);
            c.check(scheme, 5, &format!("{scheme} {alg}"));
        }
    }
}

#[test]
fn multi_packet_messages_are_relayed_packet_by_packet_intact() {
    let g: Vec<u16> = vec![0, 5, 2, 7, 1, 6];
    for scheme in Scheme::ALL {
        for alg in [Algorithm::Binomial, Algorithm::Serial] {
            let mut c = Case::new(8, &g, alg, 3 * 4096 + 100, "modern");
            c.run(scheme, alg, 3);
            c.check(scheme, 3, &format!("{scheme} {alg} 12 KiB"));
        }
    }
}

#[test]
fn a_member_whose_port_is_closed_is_reported_not_reached_and_the_rest_get_it() {
    // Binomial over 8: rank 4 relays to 6 and 5, and 6 to 7. With rank 4's
    // port closed its whole subtree (4 members) is not reached; the root
    // says so in its one completion, and the others have the message.
    let g: Vec<u16> = (0..8).collect();
    for scheme in [Scheme::Nic, Scheme::NicCached, Scheme::Assisted] {
        let mut c = Case::new(8, &g, Algorithm::Binomial, 64, "lanai9-gm");
        let gone = c.members.remove(4);
        gone.port.close();
        c.run(scheme, Algorithm::Binomial, 2);
        let root = &c.members[0];
        assert_eq!(
            root.done,
            vec![(0, SendStatus::Incomplete, 4), (1, SendStatus::Incomplete, 4)],
            "{scheme}: the root counts rank 4's subtree as not reached"
        );
        assert_eq!(root.lost, vec![4; 2], "{scheme}: and names its head, each time");
        let all = host_driver::NotReached { members: vec![4, 5, 6, 7], complete: true, count: 4 };
        assert_eq!(
            root.not_reached,
            vec![all.clone(), all],
            "{scheme}: the group expands that into its members, in rank order"
        );
        for m in &c.members[1..] {
            let reached = ![5, 6, 7].contains(&m.node);
            assert_eq!(
                m.got,
                if reached { vec![0, 1] } else { vec![] },
                "{scheme}: node {}",
                m.node
            );
        }
    }
}

#[test]
fn a_lost_leaf_below_a_relay_is_named_in_the_root_completion() {
    // Binomial over 8: rank 5 is a leaf below relay 4. Its port closed,
    // relay 4 reports it lost and the root names it.
    let g: Vec<u16> = (0..8).collect();
    for scheme in [Scheme::Nic, Scheme::NicCached, Scheme::Assisted] {
        let mut c = Case::new(8, &g, Algorithm::Binomial, 64, "lanai9-gm");
        let gone = c.members.remove(5);
        gone.port.close();
        c.run(scheme, Algorithm::Binomial, 1);
        let root = &c.members[0];
        assert_eq!(root.done, vec![(0, SendStatus::Incomplete, 1)], "{scheme}");
        assert_eq!(root.lost, vec![5], "{scheme}");
        let want = host_driver::NotReached { members: vec![5], complete: true, count: 1 };
        assert_eq!(root.not_reached, vec![want], "{scheme}");
    }
}

#[test]
fn every_member_not_reached_is_named_however_many_there_are() {
    // Twelve members, four with their ports closed. Every tree names all
    // the heads of what it lost (relays pass on their children's in their
    // reports), and the group expands them into exactly the members that
    // did not get the message.
    let g: Vec<u16> = (0..12).collect();
    let closed = [3u16, 6, 9, 11];
    let algs = [Algorithm::Separate, Algorithm::Binomial, Algorithm::Binary, Algorithm::Serial];
    for scheme in [Scheme::Nic, Scheme::NicCached, Scheme::Assisted] {
        for alg in algs {
            let mut c = Case::new(12, &g, alg, 64, "lanai9-gm");
            for &r in closed.iter().rev() {
                c.members.remove(r as usize).port.close();
            }
            c.run(scheme, alg, 2);
            // What cannot be reached: the closed members' subtrees.
            let mut want: Vec<u16> = closed
                .iter()
                .flat_map(|&r| host_driver::nic_abi::multicast::subtree_ranks(alg, 12, r))
                .collect();
            want.sort_unstable();
            want.dedup();
            let n = want.len() as u16;
            let all = host_driver::NotReached { members: want.clone(), complete: true, count: n };
            let root = &c.members[0];
            assert_eq!(root.not_reached, vec![all.clone(), all], "{scheme} {alg}");
            for m in &c.members[1..] {
                let got = if want.contains(&m.node) { vec![] } else { vec![0, 1] };
                assert_eq!(m.got, got, "{scheme} {alg}: node {}", m.node);
            }
        }
    }
}

#[test]
fn a_member_whose_nic_is_gone_is_named_within_the_send_timeout() {
    // Binomial over 8 on lanai9-gm with a 20 ms send timeout: node 4's
    // cable goes down for good, so node 4 heads a subtree of 4 members no
    // packet reaches. The root gives up on node 4 when it has been silent
    // for the send timeout, and its one completion comes then (within a
    // 2 ms step of the test), naming exactly those members; the others
    // have the message.
    let g: Vec<u16> = (0..8).collect();
    let timeout = 20_000_000;
    for scheme in [Scheme::Nic, Scheme::NicCached, Scheme::Assisted] {
        let mut c = Case::with_timeout(8, &g, Algorithm::Binomial, 64, "lanai9-gm", Some(timeout));
        let outages: Vec<nic_emu::Outage> = c
            .rig
            .c
            .layout()
            .cable("node4")
            .unwrap()
            .into_iter()
            .map(|link| nic_emu::Outage { link, from_ns: 0, until_ns: u64::MAX, index: 0 })
            .collect();
        c.rig.c.set_link_outages(&outages).unwrap();
        c.members.remove(4);
        let t0 = c.rig.c.now_ns();
        c.run(scheme, Algorithm::Binomial, 1);
        let root = &c.members[0];
        let took = root.done_at.first().map_or(u64::MAX, |t| t - t0);
        assert_eq!(root.done, vec![(0, SendStatus::Incomplete, 4)], "{scheme}");
        let all = host_driver::NotReached { members: vec![4, 5, 6, 7], complete: true, count: 4 };
        assert_eq!(root.not_reached, vec![all], "{scheme}");
        assert!(took <= timeout + STEP_NS, "{scheme}: the root knew after {took} ns");
        for m in &c.members[1..] {
            let got = if [5, 6, 7].contains(&m.node) { vec![] } else { vec![0] };
            assert_eq!(m.got, got, "{scheme}: node {}", m.node);
        }
    }
}

#[test]
fn a_relayed_send_that_times_out_fails_alone_not_the_relays_own_sends_to_that_port() {
    // Binomial over 8 with a 20 ms send timeout: rank 5, a leaf below
    // relay 4, has its port open but no receive buffer, so relay 4's NIC
    // is refused for want of one until its send to 5 times out, and the
    // root names 5 not reached. That send was the NIC's own: relay 4's
    // host never heard of it, so the stream to node 5's port must not be
    // left suspended. The host's own send there afterwards is delivered
    // and completes Ok.
    let g: Vec<u16> = (0..8).collect();
    let timeout = 20_000_000;
    for scheme in [Scheme::Nic, Scheme::NicCached] {
        let mut c =
            Case::starving(8, &g, Algorithm::Binomial, 64, "lanai9-gm", Some(timeout), &[5]);
        c.run(scheme, Algorithm::Binomial, 1);
        let root = &c.members[0];
        assert_eq!(root.done, vec![(0, SendStatus::Incomplete, 1)], "{scheme}");
        assert_eq!(root.lost, vec![5], "{scheme}");
        let class = c.class;
        let (relay, leaf) = c.members.split_at_mut(5);
        let (relay, leaf) = (&mut relay[4], &mut leaf[0]);
        assert_eq!((relay.node, leaf.node), (4, 5));
        leaf.port.provide_receive_buffer(&leaf.bufs[0], class, Priority::Low, 0).unwrap();
        let src = relay.port.alloc(64).unwrap();
        relay.port.write(&src, 0, &payload(99, 64)).unwrap();
        relay.port.send(&src, 0, 64, class, Priority::Low, 5, PORT, 77).unwrap();
        let (mut sent, mut got) = (None, None);
        for _ in 0..50 {
            c.rig.step();
            while let Some(ev) = relay.port.poll() {
                if let Event::Sent { tag: 77, status, .. } = ev {
                    sent = Some(status);
                }
            }
            while let Some(ev) = leaf.port.poll() {
                if let Event::Received { len, mcast: None, .. } = ev {
                    let mut data = vec![0u8; len as usize];
                    leaf.port.read(&leaf.bufs[0], 0, &mut data).unwrap();
                    got = Some(data);
                }
            }
            if sent.is_some() && got.is_some() {
                break;
            }
        }
        assert_eq!(sent, Some(SendStatus::Ok), "{scheme}: the relay host's own send");
        assert_eq!(got, Some(payload(99, 64)), "{scheme}: delivered intact");
    }
}

#[test]
fn a_host_scheme_root_posts_as_many_children_as_the_send_ring_holds_then_the_rest() {
    // Separate addressing over 16 members: 15 sends from the root, a ring
    // slot each (the one listed child fits in the descriptor's). The root
    // has 32 send tokens, but its 8 receive buffers and 48 Resume
    // descriptors (which take no token), posted and not yet taken by its
    // NIC, leave 8 of the 64 ring slots: room for 8 children. The driver
    // posts those 8 and says so, rather than failing at the 9th; once the
    // NIC has taken them, the other 7 go too, and every member gets the
    // message once. (The NIC takes the Resumes ahead of the receive
    // buffers, whose translations it reads first; passing over them later
    // must not use up its pass, or the sends behind them would wait.)
    let g: Vec<u16> = (0..16).collect();
    let mut c = Case::new(16, &g, Algorithm::Separate, 64, "lanai9-gm");
    let class = c.class;
    let root = &mut c.members[0];
    for _ in 0..48 {
        root.port.resume(1, PORT, Priority::High).unwrap();
    }
    let src = root.port.alloc(64).unwrap();
    root.port.write(&src, 0, &payload(0, 64)).unwrap();
    let group = c.group.clone();
    let m = Multicast {
        buf: &src,
        offset: 0,
        len: 64,
        size_class: class,
        priority: Priority::Low,
        group: &group,
        scheme: Scheme::Host,
        algorithm: Algorithm::Separate,
        mseq: 0,
        tag: 1 << 32,
    };
    assert_eq!(root.port.multicast(&m), Ok(8), "as many as the ring holds");
    assert_eq!(root.port.multicast_more(&m, 8), Ok(0), "the ring is full: none more yet");
    c.rig.step();
    assert_eq!(c.members[0].port.multicast_more(&m, 8), Ok(7), "the rest, once there is room");
    for _ in 0..50 {
        c.rig.step();
        c.drain();
        if c.members[0].done.len() == 15 {
            break;
        }
    }
    let root = &c.members[0];
    assert_eq!(root.done.len(), 15, "a completion per child");
    assert!(root.done.iter().all(|&(_, s, _)| s == SendStatus::Ok), "{:?}", root.done);
    for m in &c.members {
        assert!(m.bad.is_empty(), "{:?}", m.bad);
        if m.node != 0 {
            assert_eq!(m.got, vec![0], "node {}", m.node);
        }
    }
}
