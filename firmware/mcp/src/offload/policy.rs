//! Policies: offloads that change a decision of the core instead of owning
//! traffic of their own. The machine that makes the decision asks the
//! policy compiled in; with the offload compiled out it asks the default,
//! which is the core's own decision, and compiles to it.
//!
//! - The scheduler's choice of the next stream to send from (SDMA): GM's
//!   rotation, or rate control's smallest next dispatch time
//!   (`offload::rate`).
//! - The window, ack and retransmit policy of a stream: go-back-N, or
//!   selective repeat (`offload::selective`).
