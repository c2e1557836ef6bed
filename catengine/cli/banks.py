"""``catengine banks``: list banks with their cards; ``banks show`` one bank's protocol and items;
``banks upgrade`` its latest version again, checksummed."""

from __future__ import annotations

import json
from pathlib import Path


def card_lines(card: dict) -> list[str]:
    """A bank card as a few indented lines (``catengine banks``)."""
    path = Path(str(card["path"]))
    try:
        path = path.resolve().relative_to(Path.cwd().resolve())
    except ValueError:
        pass
    lines = [f"  {path}"]
    if card.get("error"):
        return lines + [f"  unreadable: {card['error']}"]
    if card.get("description"):
        lines.append(f"  {card['description']}")
    source = card.get("source")
    if isinstance(source, dict):
        commit = str(source.get("commit", ""))[:12]
        lines.append(f"  source: {source.get('repository', source.get('dataset', ''))}"
                     + (f" @ {commit}" if commit else "") + (f"; paper: {source['paper']}" if source.get("paper") else ""))
    elif source:
        lines.append(f"  source: {source}")
    lines.append(f"  calibrated: {card.get('calibration_method') or 'n/a'} on {card.get('n_subjects')} subjects, "
                 f"{card.get('calibration_date') or str(card.get('created_at') or '')[:10]}")
    if card.get("item_id_scheme"):
        lines.append(f"  item ids: {card['item_id_scheme']}")
    audit = card.get("replay_audit")
    if isinstance(audit, dict):
        lengths = "/".join(str(v) for v in audit.get("test_length", []))
        for sel, f in audit.get("selectors", {}).items():
            lines.append(f"  replay audit, {sel} after {lengths} items: 95% coverage "
                         f"{'/'.join(f'{v:.2f}' for v in f['coverage'])} (promised {'/'.join(f'{v:.2f}' for v in f['promised'])}), "
                         f"SD ratio {'/'.join(f'{v:.1f}' for v in f['sd_ratio'])}")
    check = card.get("interval_calibration")
    if isinstance(check, dict):
        for sel, cur in check.get("curves", {}).items():
            lengths = "/".join(str(v) for v in cur.get("test_length", []))
            lines.append(f"  interval check ({check.get('folds', '?')} folds), {sel} after {lengths} items: model's 95% "
                         f"coverage {'/'.join(f'{v:.2f}' for v in cur.get('coverage_model', []))}, "
                         f"SD factor c(L) applied {'/'.join(f'{v:.2f}' for v in cur.get('c', []))}")
        for sel, cur in (check.get("score_curves") or {}).items():
            model, rand = cur.get("accuracy_mae"), cur.get("random_mean_mae")
            if model and rand and len(model) == len(rand):
                lengths = "/".join(str(v) for v in cur.get("test_length", []))
                ratios = "/".join("-" if r <= 0 else f"{m / r:.2f}" for m, r in zip(model, rand))
                lines.append(f"  score check, {sel} after {lengths} items: model-based accuracy MAE x random items' "
                             f"{ratios}")
        usual = check.get("selection")
        if usual:
            from catengine.scoring.calibration import ScoreCalibration

            scores = ScoreCalibration.from_record(check, "", "card")
            lines.append(f"  sessions default to randomised selection and the design-based score: the check found {usual}'s "
                         "model-based score worse than random items' at its longest length"
                         if scores is not None and scores.loses_to_random(usual) else f"  sessions default to {usual} selection")
    return lines


def run_banks_command(args) -> int:
    from catengine.itembank.shipped import list_banks

    action = str(args.directories[0]) if args.directories else ""
    if action in ("show", "upgrade") and not Path(action).exists():
        if len(args.directories) != 2:
            raise ValueError(f"`catengine banks {action}` takes one bank (a shipped id, a bank directory or file)")
        return (_show if action == "show" else _upgrade)(args, str(args.directories[1]))
    cards = list_banks(*args.directories, shipped=not args.no_shipped)
    if args.json:
        print(json.dumps(cards, indent=2, default=str))
        return 0
    if not cards:
        print("no item banks found" + (f" under {', '.join(map(str, args.directories))}" if args.directories else ""))
        return 0
    for card in cards:
        head = (f"{card['bank_id']} v{card['version']}  {card['response_model']}  {card['n_items']} items  "
                f"{card.get('benchmark') or '-'}  license {card.get('license') or 'not stated'}"
                + ("  (shipped)" if card.get("shipped") else ""))
        print(head)
        print("\n".join(card_lines(card)) + "\n")
    return 0


def _show(args, name: str) -> int:
    """``catengine banks show NAME [--item ID ...] [--content FILE]``: the card, the protocol and items."""
    from catengine import open_item_bank
    from catengine.itembank.describe import content_json, item_lines, protocol_lines
    from catengine.itembank.shipped import bank_card

    bank = open_item_bank(name, content=args.content)
    items = list(args.item or [])
    for item in items:
        bank.index_of(item)  # a KeyError naming the id and the bank
    if args.json:
        print(content_json(bank, items) if bank.has_content else json.dumps(bank_card(bank), indent=2, default=str))
        return 0
    print(f"{bank.bank_id} v{bank.version}  {bank.response_model}  {bank.n_items} items  "
          f"{bank.attrs.get('benchmark') or '-'}  license {bank.attrs.get('license') or 'not stated'}")
    print("\n".join(card_lines(bank_card(bank))))
    if args.content:
        print(f"  questions attached from {args.content}: {bank.n_items}/{bank.n_items} texts match the bank's sha256")
    print("\n".join(protocol_lines(bank)))
    for item in items:
        print()
        print("\n".join(item_lines(bank, item)))
    return 0


def _upgrade(args, name: str) -> int:
    """``catengine banks upgrade BANK [--out DIR]``: the latest version again, checksummed, as a new version."""
    from catengine.itembank import upgrade_item_bank

    path = upgrade_item_bank(name, args.out)
    print(f"wrote {path} (the current schema, with its content checksum; earlier versions are unchanged)")
    return 0
