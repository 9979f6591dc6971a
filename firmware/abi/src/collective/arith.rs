//! The arithmetic of reductions: an operation over a vector of elements
//! of one type, combined element by element. Both sides use it: the NIC
//! combines packets' data with it, and the host computes its reference
//! (and the host-based scheme's combining) with it, so the two agree to
//! the bit.
//!
//! Floating point is IEEE 754 as Rust computes it (on the NIC CPU, which
//! has no floating-point unit, in software). `min` and `max` take the
//! right operand only when it compares strictly below (above) the left:
//! with a NaN on either side the left operand is kept, so the order of
//! the operands matters; each algorithm fixes it (`schedule`).

/// A reduction's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Sum = 0,
    Min = 1,
    Max = 2,
    /// Bitwise and (integer types only).
    Band = 3,
    /// Bitwise or (integer types only).
    Bor = 4,
}

impl Op {
    pub const ALL: [Op; 5] = [Op::Sum, Op::Min, Op::Max, Op::Band, Op::Bor];

    pub const fn from_u8(v: u8) -> Option<Op> {
        Some(match v {
            0 => Op::Sum,
            1 => Op::Min,
            2 => Op::Max,
            3 => Op::Band,
            4 => Op::Bor,
            _ => return None,
        })
    }

    /// Is this operation defined for elements of type `t`?
    pub const fn applies_to(self, t: Dtype) -> bool {
        !(t.is_float() && matches!(self, Op::Band | Op::Bor))
    }

    pub const fn name(self) -> &'static str {
        match self {
            Op::Sum => "sum",
            Op::Min => "min",
            Op::Max => "max",
            Op::Band => "band",
            Op::Bor => "bor",
        }
    }
}

/// An element type (little-endian in memory and on the wire).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    I32 = 0,
    I64 = 1,
    U32 = 2,
    U64 = 3,
    F32 = 4,
    F64 = 5,
}

impl Dtype {
    pub const ALL: [Dtype; 6] =
        [Dtype::I32, Dtype::I64, Dtype::U32, Dtype::U64, Dtype::F32, Dtype::F64];

    pub const fn from_u8(v: u8) -> Option<Dtype> {
        Some(match v {
            0 => Dtype::I32,
            1 => Dtype::I64,
            2 => Dtype::U32,
            3 => Dtype::U64,
            4 => Dtype::F32,
            5 => Dtype::F64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 4,
            Dtype::I64 | Dtype::U64 | Dtype::F64 => 8,
        }
    }

    pub const fn is_float(self) -> bool {
        matches!(self, Dtype::F32 | Dtype::F64)
    }

    pub const fn name(self) -> &'static str {
        match self {
            Dtype::I32 => "i32",
            Dtype::I64 => "i64",
            Dtype::U32 => "u32",
            Dtype::U64 => "u64",
            Dtype::F32 => "f32",
            Dtype::F64 => "f64",
        }
    }
}

/// Which operand of a combination the accumulator is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// `acc = op(acc, other)`.
    AccLeft,
    /// `acc = op(other, acc)`.
    AccRight,
}

/// One element of type `t`: `op(l, r)`, the operands and the result as
/// their little-endian bits zero-extended to 64. Out of line: one copy
/// serves every type and operation (the NIC's code is small), and a
/// combination costs a call per element, as software arithmetic does.
#[inline(never)]
fn element(op: Op, t: Dtype, l: u64, r: u64) -> u64 {
    macro_rules! as_int {
        ($t:ty, $u:ty) => {{
            let (l, r) = (l as $u as $t, r as $u as $t);
            (match op {
                Op::Sum => l.wrapping_add(r),
                Op::Min => l.min(r),
                Op::Max => l.max(r),
                Op::Band => l & r,
                Op::Bor => l | r,
            }) as $u as u64
        }};
    }
    match t {
        Dtype::I32 => as_int!(i32, u32),
        Dtype::I64 => as_int!(i64, u64),
        Dtype::U32 => as_int!(u32, u32),
        Dtype::U64 => as_int!(u64, u64),
        Dtype::F32 => {
            let (x, y) = (f32::from_bits(l as u32), f32::from_bits(r as u32));
            match op {
                Op::Sum => (x + y).to_bits() as u64,
                Op::Min if y < x => r,
                Op::Max if y > x => r,
                Op::Band => l & r,
                Op::Bor => l | r,
                _ => l,
            }
        }
        Dtype::F64 => {
            let (x, y) = (f64::from_bits(l), f64::from_bits(r));
            match op {
                Op::Sum => (x + y).to_bits(),
                Op::Min if y < x => r,
                Op::Max if y > x => r,
                Op::Band => l & r,
                Op::Bor => l | r,
                _ => l,
            }
        }
    }
}

fn load(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..b.len()].copy_from_slice(b);
    u64::from_le_bytes(w)
}

/// Combine `other` into `acc`, element by element (integers wrap; the
/// bitwise operations on floats, which callers refuse, act on the bits).
/// Only whole elements of the shorter slice are combined: how many.
pub fn combine(op: Op, t: Dtype, acc: &mut [u8], other: &[u8], side: Side) -> usize {
    let size = t.size();
    let mut n = 0;
    for (a, o) in acc.chunks_exact_mut(size).zip(other.chunks_exact(size)) {
        let (x, y) = (load(a), load(o));
        let v = match side {
            Side::AccLeft => element(op, t, x, y),
            Side::AccRight => element(op, t, y, x),
        };
        a.copy_from_slice(&v.to_le_bytes()[..size]);
        n += 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes<T: Copy, const N: usize>(v: &[T], le: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| le(x)).collect()
    }

    #[test]
    fn integer_operations_are_the_native_ones() {
        let a = [5i32, -3, i32::MAX, 7];
        let b = [2i32, -9, 1, 7];
        for (op, want) in [
            (Op::Sum, [7, -12, i32::MIN, 14]),
            (Op::Min, [2, -9, 1, 7]),
            (Op::Max, [5, -3, i32::MAX, 7]),
            (Op::Band, [0, -11, 1, 7]),
            (Op::Bor, [7, -1, i32::MAX, 7]),
        ] {
            let mut acc = bytes(&a, i32::to_le_bytes);
            let n = combine(op, Dtype::I32, &mut acc, &bytes(&b, i32::to_le_bytes), Side::AccLeft);
            assert_eq!(n, 4);
            assert_eq!(acc, bytes(&want, i32::to_le_bytes), "{op:?}");
        }
    }

    #[test]
    fn unsigned_and_signed_differ_where_they_should() {
        let mut acc = bytes(&[u32::MAX], u32::to_le_bytes);
        combine(Op::Min, Dtype::U32, &mut acc, &bytes(&[1u32], u32::to_le_bytes), Side::AccLeft);
        assert_eq!(acc, 1u32.to_le_bytes());
        let mut acc = bytes(&[u32::MAX], u32::to_le_bytes);
        combine(Op::Min, Dtype::I32, &mut acc, &bytes(&[1u32], u32::to_le_bytes), Side::AccLeft);
        assert_eq!(acc, u32::MAX.to_le_bytes(), "-1 < 1 as i32");
    }

    #[test]
    fn a_nan_keeps_the_left_operand_in_min_and_max() {
        let nan = f64::NAN;
        for side in [Side::AccLeft, Side::AccRight] {
            let mut acc = bytes(&[nan], f64::to_le_bytes);
            combine(Op::Min, Dtype::F64, &mut acc, &bytes(&[1.0f64], f64::to_le_bytes), side);
            let v = f64::from_le_bytes(acc[..8].try_into().unwrap());
            match side {
                Side::AccLeft => assert!(v.is_nan()),
                Side::AccRight => assert_eq!(v, 1.0),
            }
        }
    }

    #[test]
    fn bitwise_operations_apply_to_integers_only() {
        for t in Dtype::ALL {
            assert_eq!(Op::Band.applies_to(t), !t.is_float());
            assert!(Op::Sum.applies_to(t) && Op::Min.applies_to(t));
        }
        for v in 0..8u8 {
            assert_eq!(Op::from_u8(v).map(|o| o as u8), (v < 5).then_some(v));
            assert_eq!(Dtype::from_u8(v).map(|t| t as u8), (v < 6).then_some(v));
        }
    }

    proptest! {
        #[test]
        fn f64_sums_are_ieee_and_commute(a in any::<f64>(), b in any::<f64>()) {
            let mut l = a.to_le_bytes().to_vec();
            combine(Op::Sum, Dtype::F64, &mut l, &b.to_le_bytes(), Side::AccLeft);
            let mut r = a.to_le_bytes().to_vec();
            combine(Op::Sum, Dtype::F64, &mut r, &b.to_le_bytes(), Side::AccRight);
            let (l, r) = (f64::from_le_bytes(l[..].try_into().unwrap()), f64::from_le_bytes(r[..].try_into().unwrap()));
            prop_assert_eq!(l.to_bits() == (a + b).to_bits() || (a + b).is_nan(), true);
            prop_assert_eq!(l.to_bits() == r.to_bits() || l.is_nan(), true);
        }

        #[test]
        fn u64_operations_match_native(a in any::<u64>(), b in any::<u64>(), op in 0u8..5) {
            let op = Op::from_u8(op).unwrap();
            let mut acc = a.to_le_bytes().to_vec();
            combine(op, Dtype::U64, &mut acc, &b.to_le_bytes(), Side::AccLeft);
            let want = match op {
                Op::Sum => a.wrapping_add(b),
                Op::Min => a.min(b),
                Op::Max => a.max(b),
                Op::Band => a & b,
                Op::Bor => a | b,
            };
            prop_assert_eq!(acc, want.to_le_bytes().to_vec());
        }
    }
}
