//! Message contents: the driver's deterministic pattern of (stream,
//! message index, byte index) (`host_programs::pattern`: a receiver checks
//! every byte and knows where a message belongs in its stream's order
//! without any side channel), and how a scenario numbers its streams.
//! The same words on every backend.

pub use host_programs::pattern::{claimed_index, fill, first_mismatch, make, matches};

/// Stream numbers: a flow's requests (or messages) and its replies.
pub fn forward_stream(flow: usize) -> u32 {
    (flow as u32) << 1
}

pub fn reply_stream(flow: usize) -> u32 {
    ((flow as u32) << 1) | 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_s_two_streams_differ_from_each_other_and_from_other_flows() {
        let ids: Vec<u32> = (0..4).flat_map(|f| [forward_stream(f), reply_stream(f)]).collect();
        let mut sorted = ids.clone();
        sorted.dedup();
        assert_eq!(sorted.len(), 8);
        // A request is not its reply, nor another flow's request.
        let m = make(64, forward_stream(1), 3);
        assert!(matches(&m, forward_stream(1), 3));
        assert!(!matches(&m, reply_stream(1), 3));
        assert!(!matches(&m, forward_stream(2), 3));
    }
}
