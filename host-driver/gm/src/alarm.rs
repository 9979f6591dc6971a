//! GM's alarms: storage the program owns (`gm_alarm_t`), kept on the
//! port's list in deadline order through their own `next` field, as GM
//! kept them. A due alarm makes `gm_receive` return a `GM_ALARM_EVENT`;
//! `gm_unknown` then runs the callbacks of every alarm due.

use std::ffi::{c_int, c_void};
use std::ptr;

/// `gm_alarm_t`, as gm.h lays it out.
#[repr(C)]
pub struct GmAlarm {
    pub next: *mut GmAlarm,
    pub state: c_int,
    pub port: *mut c_void,
    pub callback: Option<unsafe extern "C" fn(*mut c_void)>,
    pub context: *mut c_void,
    /// In GM ticks (half microseconds).
    pub deadline: u64,
}

pub const GM_ALARM_FREE: c_int = 0;
pub const GM_ALARM_SET: c_int = 1;

/// A port's set alarms, earliest first.
pub struct Alarms {
    head: *mut GmAlarm,
}

impl Default for Alarms {
    fn default() -> Alarms {
        Alarms { head: ptr::null_mut() }
    }
}

impl Alarms {
    /// Set `a` (taken off the list first if set) to go off at `deadline`.
    ///
    /// # Safety
    /// `a` points to a `gm_alarm_t` that stays valid while it is set, and
    /// every alarm on the list does.
    pub unsafe fn set(&mut self, a: *mut GmAlarm, deadline: u64) {
        // SAFETY: the caller's promise for `a` and the list.
        unsafe {
            if (*a).state == GM_ALARM_SET {
                self.remove(a);
            }
            (*a).deadline = deadline;
            (*a).state = GM_ALARM_SET;
            let mut at: *mut *mut GmAlarm = &mut self.head;
            while !(*at).is_null() && (**at).deadline <= deadline {
                at = &mut (**at).next;
            }
            (*a).next = *at;
            *at = a;
        }
    }

    /// Take `a` off the list (nothing if it is not on it).
    ///
    /// # Safety
    /// As for `set`.
    pub unsafe fn remove(&mut self, a: *mut GmAlarm) {
        // SAFETY: the caller's promise for `a` and the list.
        unsafe {
            let mut at: *mut *mut GmAlarm = &mut self.head;
            while !(*at).is_null() {
                if *at == a {
                    *at = (*a).next;
                    (*a).next = ptr::null_mut();
                    (*a).state = GM_ALARM_FREE;
                    return;
                }
                at = &mut (**at).next;
            }
        }
    }

    /// The earliest deadline, if an alarm is set.
    pub fn next_deadline(&self) -> Option<u64> {
        // SAFETY: an alarm on the list is valid while set (`set`).
        (!self.head.is_null()).then(|| unsafe { (*self.head).deadline })
    }

    /// The earliest alarm if it is due at `now`, taken off the list.
    pub fn pop_due(&mut self, now: u64) -> Option<*mut GmAlarm> {
        let a = self.head;
        // SAFETY: an alarm on the list is valid while set (`set`).
        unsafe {
            if a.is_null() || (*a).deadline > now {
                return None;
            }
            self.head = (*a).next;
            (*a).next = ptr::null_mut();
            (*a).state = GM_ALARM_FREE;
        }
        Some(a)
    }

    /// Forget every alarm (the port closes): each is free again.
    pub fn clear(&mut self) {
        while self.pop_due(u64::MAX).is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alarm() -> GmAlarm {
        GmAlarm {
            next: ptr::null_mut(),
            state: GM_ALARM_FREE,
            port: ptr::null_mut(),
            callback: None,
            context: ptr::null_mut(),
            deadline: 0,
        }
    }

    #[test]
    fn alarms_go_off_in_deadline_order_and_a_reset_moves_one() {
        let (mut a, mut b, mut c) = (alarm(), alarm(), alarm());
        let (pa, pb, pc) = (&mut a as *mut GmAlarm, &mut b as *mut GmAlarm, &mut c as *mut GmAlarm);
        let mut l = Alarms::default();
        // SAFETY: the three live to the end of the test.
        unsafe {
            l.set(pa, 30);
            l.set(pb, 10);
            l.set(pc, 20);
            l.set(pa, 5); // set again: moves to the front
            l.remove(pc);
        }
        assert_eq!(l.next_deadline(), Some(5));
        assert_eq!(l.pop_due(4), None);
        assert_eq!(l.pop_due(100), Some(pa));
        assert_eq!(l.pop_due(100), Some(pb));
        assert_eq!(l.pop_due(100), None);
        assert_eq!((a.state, b.state, c.state), (GM_ALARM_FREE, GM_ALARM_FREE, GM_ALARM_FREE));
    }
}
