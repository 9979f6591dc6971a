//! Hello over the emulated NIC: port 0 of node 0 sends one message to
//! port 0 of node 1, which receives it. Start a cluster first, then run
//! this against it (the cluster's name, default `nic`):
//!
//! ```sh
//! cargo xtask run                                         # a 2-node live cluster named `nic`
//! cargo run --release -p host-driver --example hello      # in another terminal
//! cargo run --release -p host-driver --example hello -- c1  # or another cluster, by name or path
//! ```

use std::time::Duration;

use host_driver::{Dest, DriverError, Port, RecvOpts, SendOpts};

/// What node 0 sends.
pub const MESSAGE: &[u8] = b"hello from node 0, port 0";

/// Send `MESSAGE` from node 0 to node 1 of `cluster` and return what
/// node 1 received.
pub fn hello(cluster: &str) -> Result<Vec<u8>, DriverError> {
    let mut rx = Port::attach(cluster, 1, 0)?; // node 1, port 0
    let mut tx = Port::attach(cluster, 0, 0)?; // node 0, port 0

    // A message lands only in a receive buffer of its size class: 64
    // bytes are size class 6, and the sender names that class too.
    let inbox = rx.alloc(64)?;
    rx.provide(&inbox, RecvOpts::default())?;
    let msg = tx.alloc_from(MESSAGE)?;
    let opts = SendOpts { size_class: Some(6), ..SendOpts::default() };
    tx.send_to(&msg, Dest { node: 1, port: 0 }, opts)?;
    let event = rx.recv_timeout(Duration::from_secs(10))?;
    rx.read_message(&event)
}

#[allow(dead_code)] // tests/tests/hello.rs includes this file for `hello`
fn main() -> std::process::ExitCode {
    let cluster = std::env::args().nth(1).unwrap_or_else(|| "nic".to_string());
    match hello(&cluster) {
        Ok(got) => {
            println!("node 1 received: {}", String::from_utf8_lossy(&got));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hello: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
