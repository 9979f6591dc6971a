//! The offloads compiled in: the one list the core's dispatch is built
//! from. Adding an offload is a line here (its field name, its type, the
//! cargo feature that compiles it), besides its own files.
//!
//! `offloads!` expands the list into [`Offloads`] (a field per offload)
//! and its dispatch: each call tries the offloads in list order by kind or
//! type number, every test a constant comparison, no `dyn`. With no
//! offload compiled in every call is a constant `None`/`false`.

#[allow(unused_imports)]
use super::{Intake, Offload, Packet, Received, Services};
use crate::hw::Hw;
use nic_abi::desc::Descriptor;

macro_rules! offloads {
    ($( $(#[$m:meta])* $name:ident : $ty:ty ),* $(,)?) => {
        /// Every offload compiled in, one field each.
        pub struct Offloads {
            $( $(#[$m])* pub $name: $ty, )*
            /// The earliest of their deadlines as last worked out, and
            /// whether it still holds: an offload's deadline depends on
            /// its own state only, which changes only when the core calls
            /// it, so a pass that called none asks none of them again.
            due: Option<u64>,
            due_known: bool,
        }

        impl Offloads {
            pub const fn new() -> Offloads {
                Offloads {
                    $( $(#[$m])* $name: <$ty as Offload>::NEW, )*
                    due: None,
                    due_known: false,
                }
            }

            /// Is any offload compiled in?
            pub const ANY: bool = !Self::NAMES.is_empty();

            /// The names of the offloads compiled in, in list order (an
            /// offload's id is its place here).
            pub const NAMES: &'static [&'static str] =
                &[$( $(#[$m])* <$ty as Offload>::NAME, )*];

            /// Is descriptor kind `kind` owned by an offload compiled in?
            #[inline(always)]
            pub fn owns_kind(_kind: u8) -> bool {
                $( $(#[$m])* if <$ty as Offload>::owns_kind(_kind) { return true; } )*
                false
            }

            /// Is packet type `ptype` owned by an offload compiled in?
            #[inline(always)]
            pub fn owns_type(_ptype: u8) -> bool {
                $( $(#[$m])* if <$ty as Offload>::owns_type(_ptype) { return true; } )*
                false
            }

            pub fn init<H: Hw>(&mut self, _sv: &mut Services<'_, H>) {
                self.due_known = false;
                $( $(#[$m])* self.$name.init(_sv); )*
            }

            /// Descriptor `d` of kind `kind` to its offload; None when no
            /// offload compiled in owns the kind.
            pub fn descriptor<H: Hw>(
                &mut self,
                _sv: &mut Services<'_, H>,
                _port: u8,
                _kind: u8,
                _d: &Descriptor,
                _raw: &[u8],
            ) -> Option<Intake> {
                $( $(#[$m])* if <$ty as Offload>::owns_kind(_kind) {
                    self.due_known = false;
                    return Some(self.$name.descriptor(_sv, _port, _d, _raw));
                } )*
                None
            }

            /// Packet `p` to the offload that owns its type; None when no
            /// offload compiled in does.
            pub fn packet<H: Hw>(
                &mut self,
                _sv: &mut Services<'_, H>,
                _p: &Packet,
            ) -> Option<Received> {
                let _t = _p.header.ptype as u8;
                $( $(#[$m])* if <$ty as Offload>::owns_type(_t) {
                    self.due_known = false;
                    return Some(self.$name.packet(_sv, _p));
                } )*
                None
            }

            /// The earliest deadline of any offload (worked out again only
            /// after the core called one: then out of line).
            #[inline(always)]
            pub fn deadline(&mut self) -> Option<u64> {
                if !self.due_known {
                    self.work_out_deadline();
                }
                self.due
            }

            #[inline(never)]
            fn work_out_deadline(&mut self) {
                {
                    let _d: Option<u64> = None;
                    $( $(#[$m])* let _d = match (_d, self.$name.deadline()) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    }; )*
                    self.due = _d;
                    self.due_known = true;
                }
            }

            /// Is an offload's deadline at or before `now`? (Inline: a
            /// pass asks before it sets up the offloads' services.)
            #[inline(always)]
            pub fn due(&mut self, now: u64) -> bool {
                self.deadline().is_some_and(|t| t <= now)
            }

            /// Call `expire` of each offload whose deadline came.
            #[inline(never)]
            pub fn expire<H: Hw>(&mut self, _sv: &mut Services<'_, H>) {
                if !self.due(_sv.now()) {
                    return;
                }
                self.due_known = false;
                $( $(#[$m])* if self.$name.deadline().is_some_and(|t| t <= _sv.now()) {
                    self.$name.expire(_sv);
                } )*
            }

            /// Host-DMA command `tag` of offload `id` finished.
            pub fn completion<H: Hw>(&mut self, _sv: &mut Services<'_, H>, _id: u8, _tag: u16) {
                let mut _k = 0u8;
                $( $(#[$m])* {
                    if _k == _id {
                        self.due_known = false;
                        self.$name.completion(_sv, _tag);
                        return;
                    }
                    _k += 1;
                } )*
            }

            /// Port `port` closed.
            pub fn port_closed<H: Hw>(&mut self, _sv: &mut Services<'_, H>, _port: u8) {
                self.due_known = false;
                $( $(#[$m])* self.$name.port_closed(_sv, _port); )*
            }

            /// The id of the offload named `name` (its place in the list).
            pub fn id_of(name: &str) -> Option<u8> {
                Self::NAMES.iter().position(|n| *n == name).map(|i| i as u8)
            }
        }

        impl Default for Offloads {
            fn default() -> Self {
                Self::new()
            }
        }
    };
}

offloads! {
    #[cfg(feature = "echo")]
    echo: super::echo::Echo,
    #[cfg(feature = "collective")]
    collective: super::collective::Collective,
}
