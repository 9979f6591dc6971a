//! The arguments of the everyday calls: where a message goes ([`Dest`],
//! [`RemoteAddr`]) and how ([`SendOpts`], [`RecvOpts`], [`PutOpts`],
//! [`GetOpts`]), each with a `Default` that suits most programs, and the
//! size-class rules (GM's): a message of `len` bytes has size class
//! `nic_abi::size_class_for(len)` (the smallest power of two that holds
//! it), and lands only in a receive buffer provided for that class (and
//! that priority) on the target port.

use nic_abi::{class_max_len, size_class_for, Priority, MAX_SIZE_CLASS};

use crate::DriverError;

/// A port of a node: where a message goes.
///
/// ```
/// use host_driver::Dest;
/// let to = Dest { node: 1, port: 0 };
/// assert_eq!(to, Dest::new(1, 0));
/// // A place in the memory that port registered, for put and get:
/// let there = to.at(0x1000_0000_1000);
/// assert_eq!((there.node, there.port, there.vaddr), (1, 0, 0x1000_0000_1000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Dest {
    pub node: u16,
    pub port: u8,
}

impl Dest {
    pub const fn new(node: u16, port: u8) -> Dest {
        Dest { node, port }
    }

    /// The address `vaddr` in this port's registered memory (the target
    /// port's `DmaBuf::vaddr`, which it must have told the caller).
    pub const fn at(self, vaddr: u64) -> RemoteAddr {
        RemoteAddr { node: self.node, port: self.port, vaddr }
    }
}

/// An address in a remote port's registered memory: what `Port::put_to`
/// writes into and `Port::get_from` reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    pub node: u16,
    pub port: u8,
    /// The remote port's virtual address (its `DmaBuf::vaddr`, plus an
    /// offset).
    pub vaddr: u64,
}

/// How `Port::send_to` sends. `SendOpts::default()`: low priority, tag 0,
/// the size class derived from the length, no completion event.
///
/// ```
/// use host_driver::{Priority, SendOpts};
/// let urgent = SendOpts { priority: Priority::High, tag: 7, ..SendOpts::default() };
/// // A 100-byte message is of size class 7 (up to 128 bytes) ...
/// assert_eq!(urgent.size_class(100), Ok(7));
/// // ... or of a larger class, if the receiver provides those buffers.
/// let big = SendOpts { size_class: Some(12), ..urgent };
/// assert_eq!(big.size_class(100), Ok(12));
/// // A class too small for the message is refused before anything is posted.
/// assert!(SendOpts { size_class: Some(6), ..urgent }.size_class(100).is_err());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendOpts {
    /// Which of the target port's two sub-ports (and receive buffers).
    pub priority: Priority,
    /// Comes back in the completion (`Event::Sent`) or `Event::Error`.
    pub tag: u64,
    /// The size class of the receive buffers the message is for. None:
    /// the smallest that holds it (`nic_abi::size_class_for(len)`). A
    /// class too small for the length is `DriverError::ClassTooSmall`.
    pub size_class: Option<u8>,
    /// Report the send's successful completion (`Event::Sent` with
    /// status Ok, carrying `tag`) through `Port::recv`. Ask for it when
    /// you want to know the buffer is free to change (a window of sends:
    /// `host-driver/examples/stream.rs`). Whatever it says:
    /// - a failed send is always reported (`Sent` with another status,
    ///   or `Error` if the NIC refused the descriptor);
    /// - the send token comes back when the driver reads the completion
    ///   from the event queue, reported or not;
    /// - after a post was refused `NoSendToken`, `recv` returns the next
    ///   completion that frees a token, asked for or not, so a program
    ///   that waits for a token with `recv` wakes as soon as there is one.
    pub notify: bool,
}

impl SendOpts {
    /// The size class a message of `len` bytes is sent with: the one
    /// asked for, or the smallest that holds it. `MessageTooLong` above
    /// 2^`MAX_SIZE_CLASS` bytes, `ClassTooLarge` above `MAX_SIZE_CLASS`,
    /// `ClassTooSmall` below the message's own class.
    pub fn size_class(&self, len: u64) -> Result<u8, DriverError> {
        let own = size_class_for(len);
        if own > MAX_SIZE_CLASS {
            return Err(DriverError::MessageTooLong { len });
        }
        match self.size_class {
            None => Ok(own),
            Some(class) if class > MAX_SIZE_CLASS => Err(DriverError::ClassTooLarge { class }),
            Some(class) if class < own => Err(DriverError::ClassTooSmall { class, len }),
            Some(class) => Ok(class),
        }
    }
}

/// How `Port::provide` offers a receive buffer. `RecvOpts::default()`:
/// low priority, tag 0, the largest size class the buffer holds.
///
/// ```
/// use host_driver::RecvOpts;
/// // A 4096-byte buffer takes messages of size class 12 (2049 to 4096 bytes) ...
/// assert_eq!(RecvOpts::default().size_class(4096), Ok(12));
/// // ... a 5000-byte one too (class 13 would need 8192 bytes) ...
/// assert_eq!(RecvOpts::default().size_class(5000), Ok(12));
/// // ... or messages of a smaller class, if asked.
/// assert_eq!(RecvOpts { size_class: Some(6), ..RecvOpts::default() }.size_class(4096), Ok(6));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvOpts {
    /// The sub-port the buffer serves.
    pub priority: Priority,
    /// Comes back in the `Event::Received` of the message that fills it.
    pub tag: u64,
    /// The size class of the messages it takes. None: the largest the
    /// buffer holds (2^class <= its length, at most `MAX_SIZE_CLASS`). A
    /// class the buffer is too small for is `DriverError::BufferTooSmall`.
    pub size_class: Option<u8>,
}

impl RecvOpts {
    /// The size class a receive buffer of `len` bytes is provided for.
    pub fn size_class(&self, len: u64) -> Result<u8, DriverError> {
        if len == 0 {
            return Err(DriverError::BadSize);
        }
        match self.size_class {
            // floor(log2(len)), at most the largest class.
            None => Ok((63 - len.leading_zeros() as u8).min(MAX_SIZE_CLASS)),
            Some(class) if class > MAX_SIZE_CLASS => Err(DriverError::ClassTooLarge { class }),
            Some(class) if class_max_len(class) > len => {
                Err(DriverError::BufferTooSmall { class, len })
            }
            Some(class) => Ok(class),
        }
    }
}

/// How `Port::put_to` writes. `PutOpts::default()`: low priority, tag 0,
/// no completion event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PutOpts {
    pub priority: Priority,
    /// Comes back in the completion (`Event::PutDone`) or `Event::Error`.
    pub tag: u64,
    /// Report the put's successful completion (`Event::PutDone` with
    /// status Ok) through `Port::recv`. A failed put is always reported,
    /// and after `NoSendToken` the next completion that frees a send
    /// token is returned asked for or not (as for `SendOpts::notify`).
    pub notify: bool,
}

/// How `Port::get_from` reads. `GetOpts::default()`: low priority, tag 0.
/// Its completion (`Event::GetDone`) always comes back through
/// `Port::recv`: the data is in the local buffer only then.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GetOpts {
    pub priority: Priority,
    /// Comes back in `Event::GetDone` or `Event::Error`.
    pub tag: u64,
}

// Priority (nic-abi's) has no Default: low is every option's default.

impl Default for SendOpts {
    fn default() -> SendOpts {
        SendOpts { priority: Priority::Low, tag: 0, size_class: None, notify: false }
    }
}

impl Default for RecvOpts {
    fn default() -> RecvOpts {
        RecvOpts { priority: Priority::Low, tag: 0, size_class: None }
    }
}

impl Default for PutOpts {
    fn default() -> PutOpts {
        PutOpts { priority: Priority::Low, tag: 0, notify: false }
    }
}

impl Default for GetOpts {
    fn default() -> GetOpts {
        GetOpts { priority: Priority::Low, tag: 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_takes_the_smallest_class_that_holds_the_message() {
        let d = SendOpts::default();
        let cases = [(1, 0), (2, 1), (5, 3), (64, 6), (65, 7), (4096, 12), (4097, 13)];
        for (len, class) in cases {
            assert_eq!(d.size_class(len), Ok(class), "{len} bytes");
        }
        assert_eq!(d.size_class(1 << MAX_SIZE_CLASS), Ok(MAX_SIZE_CLASS));
        assert_eq!(
            d.size_class((1 << MAX_SIZE_CLASS) + 1),
            Err(DriverError::MessageTooLong { len: (1 << MAX_SIZE_CLASS) + 1 })
        );
    }

    #[test]
    fn a_send_class_may_be_larger_never_smaller_than_the_messages() {
        let with = |class| SendOpts { size_class: Some(class), ..SendOpts::default() };
        assert_eq!(with(7).size_class(100), Ok(7));
        assert_eq!(with(12).size_class(100), Ok(12));
        assert_eq!(with(6).size_class(100), Err(DriverError::ClassTooSmall { class: 6, len: 100 }));
        assert_eq!(with(0).size_class(2), Err(DriverError::ClassTooSmall { class: 0, len: 2 }));
        assert_eq!(
            with(MAX_SIZE_CLASS + 1).size_class(1),
            Err(DriverError::ClassTooLarge { class: MAX_SIZE_CLASS + 1 })
        );
        let e = with(6).size_class(100).unwrap_err().to_string();
        assert_eq!(
            e,
            "size class 6 holds messages of at most 64 bytes, this one has 100 (its class is 7: \
             leave SendOpts::size_class None to derive it)"
        );
    }

    #[test]
    fn a_receive_buffer_takes_the_largest_class_it_holds() {
        let d = RecvOpts::default();
        let cases = [(1, 0), (2, 1), (3, 1), (64, 6), (100, 6), (4096, 12), (8191, 12)];
        for (len, class) in cases {
            assert_eq!(d.size_class(len), Ok(class), "{len} bytes");
        }
        assert_eq!(d.size_class(1 << 30), Ok(MAX_SIZE_CLASS));
        assert_eq!(d.size_class(u64::MAX), Ok(MAX_SIZE_CLASS));
        assert_eq!(d.size_class(0), Err(DriverError::BadSize));
        let with = |class| RecvOpts { size_class: Some(class), ..RecvOpts::default() };
        assert_eq!(with(6).size_class(100), Ok(6));
        assert_eq!(
            with(7).size_class(100),
            Err(DriverError::BufferTooSmall { class: 7, len: 100 })
        );
        assert_eq!(
            with(MAX_SIZE_CLASS + 1).size_class(u64::MAX),
            Err(DriverError::ClassTooLarge { class: MAX_SIZE_CLASS + 1 })
        );
    }
}
