//! Unicast on the simulator, for `cargo xtask bench --multicast-cost`:
//! ping-pong one-way latency (8 B, 4 KiB) and stream bandwidth (64 KiB)
//! on lanai9-gm and modern, as one JSON line. Built twice by the bench:
//! as is, and with `RUSTFLAGS="--cfg mcast_off"` (the MCP without its
//! multicast paths); `multicast` in the output says which.
use nic_emu::calibrate::{pingpong, stream};
use nic_emu::Profile;

fn main() {
    let mut out = serde_json::Map::new();
    out.insert("multicast".into(), mcp_multicast().into());
    for name in ["lanai9-gm", "modern"] {
        let p = Profile::load(name).expect("built-in profile");
        let mut m = serde_json::Map::new();
        for size in [8u32, 4096] {
            let r = pingpong(p.clone(), size, 200).expect("ping-pong");
            m.insert(format!("oneway_ns_{size}"), r.median_ns().into());
        }
        let s = stream(p.clone(), 65536, 200, 8).expect("stream");
        m.insert("stream_mb_s_65536".into(), s.mb_s().into());
        out.insert(name.into(), m.into());
    }
    println!("{}", serde_json::Value::Object(out));
}

fn mcp_multicast() -> bool {
    nic_emu::firmware::MULTICAST
}
