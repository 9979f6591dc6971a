//! Isolation between ports, tried as a hostile host process would: a
//! separate OS process (the `attacker` example) holds node 1 port 5
//! through the public API, then writes the node's raw `sram` file to map
//! 1 MiB of port 2's memory into its own page table, posts a receive
//! buffer and a send there, and points its event queue at port 2's (and
//! at the end of the bus). Every attempt must be refused by the NIC and
//! counted, while a stream into port 2 completes with every byte checked.
//! On live and on qemu; these tests FAIL when QEMU or the riscv target is
//! missing.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

use std::process::Command;
use std::time::Duration;

use nic_abi::stats::Stat;
use nic_emu::realtime::RtCluster;

fn attack_during_a_stream(c: &RtCluster) {
    let errors = |c: &RtCluster| c.nic_stats(1).fw[Stat::Errors as usize];
    let before = errors(c);
    let (send, recv) = rt::stream_spawn(c.path(), (0, 2), (1, 2), 16384, 300, &[]);
    let out = Command::new(rt::example_bin("cluster-tests", "attacker"))
        .arg(c.path())
        .args(["1", "5", "2"])
        .output()
        .expect("run the attacker");
    let send = rt::finish(send, Duration::from_secs(60));
    let recv = rt::finish(recv, Duration::from_secs(60));
    rt::both_succeed(c.path(), [("sender", &send), ("receiver", &recv)]);
    assert!(String::from_utf8_lossy(&recv.stdout).contains("content and order checked"));
    let said = rt::text(&out);
    assert!(out.status.success(), "an attack got through:\n{said}");
    for line in [
        "receive buffer in the victim's memory: refused",
        "send out of the victim's memory: refused",
        "event queue on the victim's: refused",
        "event queue at the end of the bus: refused",
    ] {
        assert!(said.contains(line), "missing {line:?}:\n{said}");
    }
    // Each refusal counted by the NIC: two descriptors, two opens.
    assert!(errors(c) >= before + 4, "errors {} -> {}", before, errors(c));
}

#[test]
fn a_port_aimed_at_another_ports_memory_or_queue_is_refused_on_live() {
    let c = rt::live("iso", 2);
    attack_during_a_stream(&c);
}

#[test]
fn a_port_aimed_at_another_ports_memory_or_queue_is_refused_on_qemu() {
    let c = rt::qemu_cluster("iso", 2);
    attack_during_a_stream(&c);
}
