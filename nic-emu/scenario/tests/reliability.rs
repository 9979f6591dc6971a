//! `[firmware] reliability`: the scenario's mode overrides the profile's,
//! the report names the mode that ran, and every NIC's report carries the
//! counters of what was sent again and of selective repeat's control
//! traffic.

use nic_scenario::{run, Report, Scenario};

/// Two nodes streaming both ways over lossy links, with `firmware` as the
/// scenario's `[firmware]` table.
fn lossy(firmware: &str) -> String {
    format!(
        "profile = \"lanai9-gm\"\nseed = 3\n[fabric]\nnodes = 2\n\
         [[alltoall]]\nname = \"a\"\nport = 2\nbytes = 16384\nmessages = 30\n\
         [faults]\ndrop = 0.02\n{firmware}"
    )
}

fn run_text(text: &str) -> Report {
    let v = Scenario::parse_validated(text).unwrap_or_else(|e| panic!("{e}"));
    let r = run(&v).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.all_delivered_intact(), "{}", r.summary());
    r
}

#[test]
fn the_report_names_the_mode_in_force_and_the_scenario_overrides_the_profile() {
    let default = run_text(&lossy(""));
    assert_eq!(default.reliability, "go-back-n");
    let selective = run_text(&lossy("[firmware]\nreliability = \"selective\"\n"));
    assert_eq!(selective.reliability, "selective");
    let json: serde_json::Value = serde_json::from_str(&selective.to_json()).unwrap();
    assert_eq!(json["reliability"], "selective");
    assert!(selective.summary().lines().next().unwrap().contains("reliability selective"));
    let explicit = run_text(&lossy("[firmware]\nreliability = \"go-back-n\"\n"));
    assert_eq!(explicit.reliability, "go-back-n");
    assert_eq!(
        explicit.deterministic_json(),
        default.deterministic_json(),
        "go-back-n given is the profile's default"
    );
}

#[test]
fn every_nic_reports_what_it_sent_again_in_bytes_and_selective_repeats_counters() {
    let r = run_text(&lossy(""));
    let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
    for n in json["nics"].as_array().unwrap() {
        for key in ["retx_bytes", "stats_sent", "ustats_sent", "held"] {
            assert!(n[key].is_u64(), "nics[{}].{key}: {}", n["node"], n[key]);
        }
    }
    let retx: u64 = r.nics.iter().map(|n| n.retransmits).sum();
    let bytes: u64 = r.nics.iter().map(|n| n.retx_bytes).sum();
    assert!(retx > 0, "2% loss resends something:\n{}", r.summary());
    // 16 KiB messages are four full packets: every packet sent again
    // carries 4 KiB.
    assert_eq!(bytes, retx * 4096, "{bytes} bytes in {retx} packets");
    // Under go-back-N the receiver keeps nothing past a gap and sends no
    // STAT or USTAT.
    for n in &r.nics {
        assert_eq!((n.stats_sent, n.ustats_sent, n.held), (0, 0, 0), "node {}", n.node);
    }
}

#[test]
fn the_mode_reaches_the_firmware_selective_repeat_keeps_packets_past_a_gap_and_names_it() {
    let r = run_text(&lossy("[firmware]\nreliability = \"selective\"\n"));
    let sum = |g: fn(&nic_scenario::NicReport) -> u64| r.nics.iter().map(g).sum::<u64>();
    // Only a receiver in selective mode keeps a packet that arrived past a
    // gap, and sends USTATs and STATs.
    assert!(sum(|n| n.held) > 0, "{}", r.summary());
    assert!(sum(|n| n.ustats_sent) > 0, "{}", r.summary());
    assert_eq!(sum(|n| n.retx_bytes), sum(|n| n.retransmits) * 4096);
}

/// Go-back-N at 10% loss on every link, each way: 2,000 small messages on
/// one stream arrive exactly once, in order and intact, and none waits
/// more than 250 retransmission floors (500 ms on lanai4-gm, 25 ms on
/// modern). Before, the answer to a timeout's poll was taken as a round
/// trip sample, so the measured timeout grew to its ceiling (64 floors)
/// and backoff doubled it six times: single messages waited 8 s on
/// lanai4-gm and a stream of 5,000 took 31 s.
#[test]
fn go_back_n_at_ten_percent_loss_never_starves_a_message() {
    use nic_device::profile::Profile;
    for profile in ["lanai4-gm", "lanai9-gm", "modern"] {
        let floor = Profile::load(profile).unwrap().firmware.retransmit_ns;
        for seed in 1..=3 {
            let r = run_text(&format!(
                "profile = \"{profile}\"\nseed = {seed}\n[fabric]\nnodes = 2\n\
                 [[flows]]\nname = \"s\"\nsrc = [0, 2]\ndst = [1, 2]\nkind = \"stream\"\n\
                 bytes = 64\nmessages = 2000\n[faults]\ndrop = 0.1\n\
                 [firmware]\nreliability = \"go-back-n\"\n"
            ));
            let f = &r.flows[0];
            assert_eq!(f.delivered, 2000, "{profile} seed {seed}:\n{}", r.summary());
            let worst = f.latency_ns.max;
            assert!(
                worst <= 250 * floor,
                "{profile} seed {seed}: a message waited {} ms (floor {} ms)",
                worst as f64 / 1e6,
                floor as f64 / 1e6
            );
        }
    }
}
