//! Evaluates augurs-changepoint (BOCPD, Normal-Gamma prior; autoregressive GP)
//! on the series of analysis/tests/changepoint_rates.rs: clean series, busy
//! nights (5 % of nights 30 % low), steps and drifts from night 40 of 60.
//! The figures are quoted in docs/architecture.md.
use augurs_changepoint::{Detector, NormalGammaDetector, DefaultArgpcpDetector, dist::NormalGamma};
use rand::{SeedableRng, rngs::StdRng};
use rand_distr::{Distribution, Normal};
use std::time::Instant;

fn series(rng: &mut StdRng, n: usize, cv: f64, start: usize, step: f64, drift: f64) -> Vec<f64> {
    let nz = Normal::new(0.0, cv).unwrap();
    (0..n).map(|i| {
        let mut m = 1.0;
        if i >= start { m += step; m -= drift * ((i - start + 1) as f64); }
        100.0 * m * (1.0 + nz.sample(rng))
    }).collect()
}
fn standardize(y: &[f64], base: usize) -> Vec<f64> {
    let b = &y[..base];
    let mut v = b.to_vec(); v.sort_by(f64::total_cmp);
    let med = v[v.len()/2];
    let mut d: Vec<f64> = b.iter().map(|x| (x-med).abs()).collect(); d.sort_by(f64::total_cmp);
    let mad = 1.4826 * d[d.len()/2];
    y.iter().map(|x| (x-med)/mad).collect()
}
fn cps(which: &str, y: &[f64]) -> Vec<usize> {
    match which {
        "bocpd" => NormalGammaDetector::normal_gamma(250.0, NormalGamma::new_unchecked(0.0, 1.0, 1.0, 1.0)).detect_changepoints(y),
        _ => DefaultArgpcpDetector::default().detect_changepoints(y),
    }
}
fn main() {
    let mut rng = StdRng::seed_from_u64(7);
    let n = 60; let start = 40;
    for which in ["bocpd", "argpcp"] {
        let reps = if which == "bocpd" { 300 } else { 40 };
        let t = Instant::now();
        // false alarms on clean: online — at each night t >= 20, any changepoint in the last night's index?
        let mut fa = 0; let mut nights = 0;
        for _ in 0..reps {
            for cv in [0.01, 0.03] {
                let y = standardize(&series(&mut rng, n, cv, n, 0.0, 0.0), 20);
                let c = cps(which, &y);
                fa += c.iter().filter(|&&i| i > 0).count();
                nights += n - 20;
            }
        }
        // busy nights: 5 % of nights 30 % low (one at a time), online: alarms = nights t whose prefix has a change point in its last 2 nights
        let (mut bfa, mut bn, mut single) = (0, 0, 0);
        for _ in 0..reps.min(100) {
            for cv in [0.01, 0.03] {
                let mut y = series(&mut rng, n, cv, n, 0.0, 0.0);
                for v in y.iter_mut().skip(20) { if rand::Rng::r#gen::<f64>(&mut rng) < 0.05 { *v *= 0.7; } }
                let z = standardize(&y, 20);
                let c = cps(which, &z);
                single += c.iter().filter(|&&i| i >= 20).count();
                for t in 22..=n { bn += 1; let c = cps(which, &z[..t]); if c.iter().any(|&i| i + 2 >= t) { bfa += 1; } }
            }
        }
        println!("{which}: busy nights: {bfa} alarmed nights of {bn} ({:.1}/1000); change points in full series: {single}", bfa as f64 * 1000.0 / bn as f64);
        println!("{which}: clean: {fa} change points over {nights} series-nights ({:.1}/1000) in {:?}", fa as f64 * 1000.0 / nights as f64, t.elapsed());
        for (label, step, drift) in [("step -5%", -0.05, 0.0), ("step -10%", -0.10, 0.0), ("step -20%", -0.2, 0.0), ("drift -1%/n", 0.0, 0.01), ("drift -3%/n", 0.0, 0.03)] {
            for cv in [0.01, 0.03] {
                let mut hit = 0; let mut loc_ok = 0; let mut delays = vec![];
                for _ in 0..reps.min(100) {
                    // online: detect on prefixes, first prefix with a cp >= start-2
                    let full = series(&mut rng, n, cv, start, step, drift);
                    for end in start+1..=n {
                        let y = standardize(&full[..end], 20);
                        let c = cps(which, &y);
                        if let Some(&i) = c.iter().find(|&&i| i + 2 >= start) { hit += 1; delays.push(end - 1 - start); if i.abs_diff(start) <= 1 { loc_ok += 1; } break; }
                    }
                }
                delays.sort();
                let med = delays.get(delays.len()/2).copied();
                println!("  {label} cv {cv}: recall {hit}/{} located±1 {loc_ok} median delay {med:?}", reps.min(100));
            }
        }
        println!("  total {:?}", t.elapsed());
    }
}
