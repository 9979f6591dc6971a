//! The scenario parser fed hostile text: arbitrary strings, and a valid
//! scenario with one value swapped for an arbitrary one. Parsing and
//! validation return a scenario or an error naming a key, and pointing at
//! the value in the text adds to the message; they never panic. The suite runs proptest's default number of cases; `cargo xtask
//! fuzz` runs them with 10^6 (PROPTEST_CASES).

use nic_scenario::format::with_excerpt;
use nic_scenario::Scenario;
use proptest::prelude::*;

const VALID: &str = r#"
profile = "lanai9-gm"
seed = 7
[fabric]
nodes = 6
topology = "two-switch"
[[flows]]
name = "a"
kind = "stream"
src = [0, 1]
dst = [5, 2]
sizes = [8, 1500, 20000]
messages = 20
window = 4
start_us = 10
stop_us = 900
[[flows]]
name = "m"
kind = "multicast"
src = [1, 3]
group = [2, 3, 4]
scheme = "assisted"
algorithm = "k-binomial"
bytes = 64
messages = 5
[[alltoall]]
name = "x"
port = 4
kind = "stream"
sizes = [64]
messages = 2
[faults]
drop = 0.01
[[faults.link_down]]
link = "node1"
at_us = 100
for_us = 50
[firmware]
send_timeout_us = 5000
reliability = "selective"
[run]
limit_ms = 100
"#;

/// Values a key may be given: numbers at and past every limit, strings,
/// arrays, tables.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string()),
        any::<u64>().prop_map(|v| v.to_string()),
        any::<f64>().prop_map(|v| format!("{v:?}")),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        Just("1e308".to_string()),
        "[a-z0-9-]{0,12}".prop_map(|s| format!("\"{s}\"")),
        proptest::collection::vec(any::<i32>(), 0..5).prop_map(|v| format!("{v:?}")),
        Just("{ a = 1 }".to_string()),
        Just("true".to_string()),
    ]
}

proptest! {
    #[test]
    fn fuzz_arbitrary_text(text in ".{0,400}") {
        if let Err(e) = Scenario::parse_validated(&text) {
            let first = e.message.clone();
            prop_assert!(with_excerpt(&text, e).message.starts_with(&first));
        }
    }

    #[test]
    fn fuzz_one_value_swapped(line in 0usize..60, v in value()) {
        let mut lines: Vec<String> = VALID.lines().map(str::to_string).collect();
        let i = line % lines.len();
        if let Some((key, _)) = lines[i].split_once(" = ") {
            lines[i] = format!("{key} = {v}");
        }
        let text = lines.join("\n");
        if let Err(e) = Scenario::parse_validated(&text) {
            let first = e.message.clone();
            prop_assert!(with_excerpt(&text, e).message.starts_with(&first));
        }
    }
}

#[test]
fn the_unmutated_scenario_is_valid() {
    Scenario::parse_validated(VALID).unwrap();
}
