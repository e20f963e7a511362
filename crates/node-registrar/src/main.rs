//! `node-registrar`: the binary follows in the next commit.

fn main() {}
