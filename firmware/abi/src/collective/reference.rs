//! The reference: a collective run to the end over a perfect network,
//! every member stepping through its schedule. What each member ends
//! with is what the NICs (and the host-based scheme) must produce, to the
//! bit, floating point included, since both follow the same schedule.
//! Host side only (feature `std`).

extern crate std;
use std::collections::HashMap;
use std::vec::Vec;

use super::{chunk_bytes, chunks, combine, Alg, Dtype, How, Kind, Op, Shape, Step};

/// A collective to evaluate.
#[derive(Debug, Clone, Copy)]
pub struct Spec {
    pub kind: Kind,
    pub alg: Alg,
    pub n: u16,
    pub root: u16,
    pub op: Op,
    pub dtype: Dtype,
    /// The chunk size (`chunk_bytes` of the fabric's MTU and SRAM).
    pub chunk: u32,
}

impl Spec {
    /// With the chunk size the NICs use on a fabric of MTU `mtu` whose
    /// NICs have `sram` bytes of SRAM.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        kind: Kind,
        alg: Alg,
        n: u16,
        root: u16,
        op: Op,
        dtype: Dtype,
        (mtu, sram): (u32, u32),
    ) -> Spec {
        let chunk = chunk_bytes(mtu, sram, super::unit(kind, dtype));
        Spec { kind, alg, n, root, op, dtype, chunk }
    }
}

/// What the run found.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// Each member's vector at the end (the result where the collective
    /// delivers one; a reduce's non-roots keep partial sums).
    pub values: Vec<Vec<u8>>,
    /// Messages sent, all members together.
    pub messages: u64,
    /// For each member, the members whose entry came before its end
    /// (causally): a barrier's must be all of them.
    pub heard: Vec<Vec<bool>>,
}

/// Run `s` with `inputs` (one vector per rank, all of one length; a
/// barrier's are empty). Err when a member could not finish, a message was
/// never taken, or a schedule sent one twice: a broken schedule.
pub fn run(s: &Spec, inputs: &[Vec<u8>]) -> Result<Outcome, std::string::String> {
    let n = s.n as usize;
    if inputs.len() != n {
        return Err(std::format!("{} inputs for {} members", inputs.len(), n));
    }
    let len = inputs[0].len() as u32;
    let nchunks = chunks(len, s.chunk);
    let shape = |rank| Shape { kind: s.kind, alg: s.alg, n: s.n, rank, root: s.root };
    let mut values: Vec<Vec<u8>> = inputs.to_vec();
    let mut at = std::vec![std::vec![0usize; nchunks as usize]; n];
    let mut heard: Vec<Vec<bool>> = (0..n).map(|r| (0..n).map(|i| i == r).collect()).collect();
    // (to, from, chunk, tag) -> (value, what the sender had heard)
    type Mail = HashMap<(u16, u16, u32, u8), (Vec<u8>, Vec<bool>)>;
    let mut mail: Mail = HashMap::new();
    let mut messages = 0u64;
    loop {
        let mut moved = false;
        for r in 0..n {
            for c in 0..nchunks {
                let steps = shape(r as u16).steps(c);
                let range = (c * s.chunk) as usize..((c + 1) * s.chunk).min(len) as usize;
                while let Some(step) = steps.get(at[r][c as usize]) {
                    match step {
                        Step::Send { to, tag } => {
                            let v = values[r][range.clone()].to_vec();
                            let key = (to, r as u16, c, tag);
                            if mail.insert(key, (v, heard[r].clone())).is_some() {
                                return Err(std::format!("{key:?} sent twice"));
                            }
                            messages += 1;
                        }
                        Step::Recv { from, tag, how } => {
                            let Some((v, h)) = mail.remove(&(r as u16, from, c, tag)) else {
                                break;
                            };
                            for (mine, theirs) in heard[r].iter_mut().zip(h) {
                                *mine |= theirs;
                            }
                            let dst = &mut values[r][range.clone()];
                            match how {
                                How::Copy => dst.copy_from_slice(&v),
                                How::Combine(side) => {
                                    combine(s.op, s.dtype, dst, &v, side);
                                }
                            }
                        }
                    }
                    at[r][c as usize] += 1;
                    moved = true;
                }
            }
        }
        if !moved {
            break;
        }
    }
    for (r, at) in at.iter().enumerate() {
        for c in 0..nchunks {
            if at[c as usize] < shape(r as u16).steps(c).len() {
                return Err(std::format!("rank {r} chunk {c} stuck at step {}", at[c as usize]));
            }
        }
    }
    if let Some(k) = mail.keys().next() {
        return Err(std::format!("{k:?} never taken"));
    }
    Ok(Outcome { values, messages, heard })
}
