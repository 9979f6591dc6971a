//! [`Config`]: what the MCP reads of the register block at init (this
//! node, the cluster's size, the MTU, the timeouts, tokens, window and
//! reliability mode), and [`InitError`], why it would not start.

use crate::hw::Hw;
use crate::records::WINDOW_MAX;
use nic_abi::regs;

/// Why the firmware would not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitError {
    BadMagic,
    AbiMismatch,
    BadConfig(&'static str),
}

impl InitError {
    /// The register that stopped it, for a log line (few bytes: the
    /// image is small).
    pub fn reason(&self) -> &'static str {
        match self {
            InitError::BadMagic => "MAGIC",
            InitError::AbiMismatch => "ABI_VERSION",
            InitError::BadConfig(reg) => reg,
        }
    }
}

/// Configuration read from the register block at init.
#[derive(Debug, Clone, Copy)]
pub struct Config {
    pub node: u16,
    pub nodes: u16,
    pub mtu: u32,
    pub send_timeout: u64,
    pub rto: u64,
    pub ack_delay: u64,
    pub nobuf_retry: u64,
    pub send_tokens: u32,
    pub recv_tokens: u32,
    pub window: u32,
    /// Selective repeat (`regs::RELIABILITY_SELECTIVE`) instead of
    /// go-back-N.
    pub selective: bool,
}

impl Config {
    pub(crate) const EMPTY: Config = Config {
        node: 0,
        nodes: 0,
        mtu: 0,
        send_timeout: 0,
        rto: 0,
        ack_delay: 0,
        nobuf_retry: 0,
        send_tokens: 0,
        recv_tokens: 0,
        window: 0,
        selective: false,
    };

    pub(crate) fn read(hw: &impl Hw) -> Result<Config, InitError> {
        if hw.reg(regs::MAGIC) != regs::MAGIC_VALUE {
            return Err(InitError::BadMagic);
        }
        if hw.reg(regs::ABI_VERSION) != regs::ABI_VERSION_VALUE {
            return Err(InitError::AbiMismatch);
        }
        // A word out of its range stops the firmware here. A timing
        // profile runs the same check (`regs::BootCfg`), so it refuses such
        // a value first, naming its own key. The host counts its tokens
        // from the same registers: a value the firmware cannot honour is
        // refused, not quietly lowered (a send past the firmware's count
        // would wait in the ring and hold up the receive buffers posted
        // behind it).
        let boot = regs::BootCfg {
            num_nodes: hw.reg(regs::NUM_NODES),
            node_id: hw.reg(regs::NODE_ID),
            send_tokens: hw.reg(regs::SEND_TOKENS),
            recv_tokens: hw.reg(regs::RECV_TOKENS),
            mtu: hw.reg(regs::MTU),
        };
        boot.check().map_err(|r| InitError::BadConfig(r.reg))?;
        let regs::BootCfg { num_nodes: nodes, node_id: node, send_tokens, recv_tokens, mtu } = boot;
        let c = Config {
            node: node as u16,
            nodes: nodes as u16,
            mtu,
            send_timeout: hw.reg(regs::SEND_TIMEOUT_TICKS).max(1),
            rto: hw.reg(regs::RETRANSMIT_TICKS).max(1),
            ack_delay: hw.reg(regs::ACK_DELAY_TICKS),
            nobuf_retry: hw.reg(regs::NOBUF_RETRY_TICKS).max(1),
            send_tokens,
            recv_tokens,
            window: hw.reg(regs::WINDOW).clamp(1, WINDOW_MAX),
            // Selective repeat in an MCP built without it (feature
            // `selective` off) is ignored: the streams run go-back-N.
            selective: cfg!(feature = "selective")
                && hw.reg(regs::RELIABILITY) == regs::RELIABILITY_SELECTIVE,
        };
        if !c.selective && hw.reg(regs::RELIABILITY) == regs::RELIABILITY_SELECTIVE {
            log_warn!("selective repeat is not compiled in: the streams run go-back-N");
        }
        // Selective repeat tracks what each stream has in flight in a
        // bitmap of `SR_WINDOW` packets: its window is at most that.
        #[cfg(feature = "selective")]
        let window =
            if c.selective { c.window.min(crate::offload::selective::SR_WINDOW) } else { c.window };
        #[cfg(not(feature = "selective"))]
        let window = c.window;
        Ok(Config { window, ..c })
    }
}
