//! A catalog entry as the protocol carries it: the domain's
//! [`BenchmarkInfo`] (everything but the command) mapped once to
//! `BenchmarkDef`, for the agent's registration and the coordinator's
//! `ListBenchmarks`. The way back, with its checks, is the coordinator's
//! (`convert::catalog`).
use benchlake_core::bench::BenchmarkInfo;

use crate::v1;

/// `b` as the protocol's `BenchmarkDef`.
pub fn benchmark_def(b: &BenchmarkInfo) -> v1::BenchmarkDef {
    v1::BenchmarkDef {
        name: b.name.clone(),
        kind: b.kind.clone(),
        description: b.description.clone(),
        params: b
            .params
            .iter()
            .map(|p| v1::ParamDef {
                name: p.name.clone(),
                r#type: p.ty.as_str().into(),
                default: p.default.clone(),
                optional: p.optional,
                min: p.min,
                max: p.max,
                choices: p.choices.clone(),
                within: p.within.clone(),
                description: p.description.clone(),
            })
            .collect(),
        outputs: b
            .outputs
            .iter()
            .map(|o| v1::OutputDef {
                file: o.file.clone(),
                format: o.format.clone(),
                required: o.required,
            })
            .collect(),
        timeout_s: b.timeout_s,
        max_timeout_s: b.max_timeout_s,
        launchers: b.launchers.iter().map(|l| l.as_str().to_string()).collect(),
        run_as: b.run_as.clone(),
    }
}
