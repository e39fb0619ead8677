//! Dimemas's cost model of one collective phase (its `calcula_fan` and
//! `compute_contention_stage`): what [`super::sim`] charges a fan-in or
//! fan-out of a collective, kept apart from the event loop that calls it.
use benchlake_formats::dimemas::{GopModel, GopSize};

const MB: f64 = 1_048_576.0;

/// ns per byte for a bandwidth in MB/s (MB = 2^20 B), 0 for an instantaneous network.
pub(crate) fn bw_ns_per_byte(bw: f64) -> f64 {
    if bw != 0.0 { 1e9 / MB / bw } else { 0.0 }
}

/// Dimemas's `compute_contention_stage`: binomial-tree steps with `buses` buses.
pub(crate) fn contention_stages(ntasks: u32, buses: u32) -> u32 {
    let loga = (0..ntasks)
        .find(|&i| i < 31 && (1u64 << i) >= u64::from(ntasks))
        .unwrap_or(0);
    if buses == 0 {
        return loga;
    }
    let mut total = 0;
    for i in 0..loga {
        let mut parallel = 0u32;
        let mut j = (1u64 << i) - 1;
        while j + 1 < u64::from(ntasks) {
            parallel += 1;
            j += 1u64 << (i + 1);
        }
        total += parallel.div_ceil(buses);
    }
    total
}

/// Dimemas's `calcula_fan`: (time, latency) of one collective phase, in ns.
#[allow(clippy::too_many_arguments)]
pub(crate) fn fan(
    bw: f64,
    partners: u32,
    buses: u32,
    fan_in: bool,
    model: GopModel,
    size: GopSize,
    s: u64,
    r: u64,
    startup: f64,
) -> (f64, f64) {
    let bandw = bw_ns_per_byte(bw);
    let mess = match size {
        GopSize::Curr => {
            if fan_in {
                s
            } else {
                r
            }
        }
        GopSize::Min => s.min(r),
        GopSize::Max => s.max(r),
        GopSize::Mean => (s + r) / 2,
        GopSize::TwoMax => 2 * s.max(r),
        GopSize::SPlusR => s + r,
    } as f64;
    match model {
        GopModel::Zero => (0.0, 0.0),
        GopModel::Cte => (startup + mess * bandw, startup),
        GopModel::Lin => {
            // Dimemas keeps the factor in a C float.
            let factor = f64::from(partners.saturating_sub(1) as f32);
            ((startup + mess * bandw) * factor, startup * factor)
        }
        GopModel::Log => {
            let factor = f64::from(contention_stages(partners, buses) as f32);
            ((startup + mess * bandw) * factor, startup * factor)
        }
    }
}
