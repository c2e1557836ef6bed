"""``catengine serve``: the JSON-lines protocol on stdin/stdout for any evaluation harness."""

from __future__ import annotations

import sys

from catengine.cli.options import open_bank, strategies


def run_serve_command(args) -> int:
    from catengine.console import describe_stopping
    from catengine.session import Engine, serve

    bank = open_bank(args.bank)
    log = args.log
    if log is not None and log.exists() and log.stat().st_size > 0:
        engine = Engine.resume(log, bank)
        print(f"catengine serve: resumed {len(engine.sessions)} session(s) from {log} "
              "(the configuration is the one in the log)", file=sys.stderr)
    else:
        chosen = strategies(args, bank)
        engine = Engine(bank, rng=args.seed, log=log, **chosen)
        print(f"catengine serve: bank {bank.bank_id} v{bank.version}, {bank.n_items} items; log {log or '(none)'}; "
              f"{describe_stopping(chosen['stopping'])}; one JSON request per line", file=sys.stderr)
    sys.stderr.flush()
    return serve(engine, sys.stdin, sys.stdout)
