//! The hello example (host-driver/examples/hello.rs) against a live
//! cluster: its code called here, and the example program itself built
//! with cargo and run as a separate process, as README.md tells a
//! newcomer to. The message must arrive intact; with no cluster there,
//! the program must fail naming the directory it looked in.

#[path = "../../nic-emu/tests/rt/mod.rs"]
mod rt;

#[path = "../../host-driver/examples/hello.rs"]
mod hello;

use std::process::Command;
use std::time::Duration;

use host_driver::nic_abi::stats::Stat;

#[test]
fn the_hello_code_delivers_its_message_intact_on_a_live_cluster() {
    let c = rt::live("hello-fn", 2);
    let got = hello::hello(&c.path().to_string_lossy()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(got, hello::MESSAGE);
    // One message crossed the fabric, to node 1. (Not MessagesSent: node 0
    // counts its send when the ack comes back, which may be after node 1
    // has the message and the program has closed its ports.)
    let received = |n: usize| c.nic_stats(n).fw[Stat::MessagesReceived as usize];
    assert_eq!((received(0), received(1)), (0, 1));
}

#[test]
fn the_hello_program_prints_what_node_1_received() {
    let c = rt::live("hello-bin", 2);
    let bin = rt::example_bin("host-driver", "hello");
    let child = Command::new(&bin)
        .arg(c.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {}: {e}", bin.display()));
    let out = rt::finish(child, Duration::from_secs(60));
    assert!(out.status.success(), "{}", rt::text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("node 1 received: {}\n", String::from_utf8_lossy(hello::MESSAGE))
    );
    // The NICs delivered one message, to node 1.
    let received = |n: usize| c.nic_stats(n).fw[Stat::MessagesReceived as usize];
    assert_eq!((received(0), received(1)), (0, 1));
    // The program let go of both ports: they open again.
    let port = host_driver::Port::attach(&c.path().to_string_lossy(), 1, 0).unwrap();
    assert_eq!(port.address(), host_driver::Dest::new(1, 0));
}

#[test]
fn the_hello_program_without_a_cluster_names_the_directory_it_looked_in() {
    let missing = rt::cluster_path("hello-none");
    let bin = rt::example_bin("host-driver", "hello");
    let out = Command::new(&bin).arg(&missing).output().unwrap();
    assert!(!out.status.success(), "{}", rt::text(&out));
    let name = std::path::Path::new(&missing).file_name().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "hello: cluster directory {missing}: not found: no cluster.toml there (is the \
             cluster running? Start one with `cargo xtask run --name {name}` or `nic-cluster run \
             --name {name} --nodes 2`)\n"
        )
    );
}
