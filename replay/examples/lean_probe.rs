// temporary prototype: measure a replay-only binary's peak memory
use std::collections::BTreeMap;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let model = benchlake_replay::models::get(&a[1]).expect("model");
    let threads: usize = a[3].parse().unwrap_or(1);
    let r = model
        .replay_threads(std::path::Path::new(&a[2]), &BTreeMap::new(), threads)
        .expect("replay");
    if let Some(s) = model.summary_text {
        print!("{}", s(&r));
    }
    println!("{:?}", r.ranks.len());
}
