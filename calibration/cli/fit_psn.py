"""Options of ``calibration fit --method psn`` (PSN-IRT 4PL + last-layer Laplace posterior).

Defaults as the reference train.py (Adam lr 3e-3, weight decay 1e-4, batch 512, 30 epochs,
widths 64/128, seed 3407 when --seed is not given), except that d > c is enforced unless
``--reference-head`` is passed (see ``PSNCalibrator``).
"""

from __future__ import annotations

import argparse

REFERENCE_SEED = 3407  # the reference train.py's seed


def _temperature(text: str):
    if text in ("mean-loss", "split-half"):
        return text
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, 'split-half' or 'mean-loss', got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, 'split-half' or 'mean-loss', got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("PSN-IRT options")
    g.add_argument("--epochs", type=int, default=30, help="training epochs (default 30)")
    g.add_argument("--learning-rate", type=float, default=3e-3, help="Adam learning rate (default 3e-3)")
    g.add_argument("--weight-decay", type=float, default=1e-4, help="Adam coupled weight decay (default 1e-4)")
    g.add_argument("--batch-size", type=int, default=512, help="mini-batch size in cells (default 512)")
    g.add_argument("--hidden-dim", type=int, default=64, help="embedding-table width (default 64)")
    g.add_argument("--embedding-dim", type=int, default=128, help="embedding width (default 128)")
    g.add_argument("--reference-head", action="store_true", help="d = sigmoid(p3) as the reference (d > c not enforced)")
    g.add_argument("--validation-fraction", type=float, default=0.0, help="share of cells for early stopping (default 0: none)")
    g.add_argument("--patience", type=int, default=4, help="early-stopping patience in epochs (default 4)")
    g.add_argument("--prior-precision", type=float, default=1.0, help="Laplace prior precision delta (default 1.0)")
    g.add_argument("--tune-prior-precision", action="store_true", help="maximise the Laplace evidence over delta")
    g.add_argument("--temperature", type=_temperature, default=1.0, metavar="T",
                   help="Laplace likelihood temperature: H = GGN / T + delta I (default 1); 'split-half' fits two item "
                        "halves and sets T so that the ability SDs match how far the halves disagree; 'mean-loss' sets "
                        "T = number of observed cells (the Laplace of the mean training loss, seed 002's setting)")
    g.add_argument("--curvature", choices=("fisher", "logistic", "exact"), default="fisher", help="Laplace curvature (default fisher)")
    g.add_argument("--float64", action="store_true", help="train in float64 (default float32, as torch)")
    g.add_argument("--native-scale", action="store_true", help="keep the network's theta scale (default: standardise)")
    g.add_argument("--no-features", action="store_true", help="omit the (J x 129) b feature matrix from /posterior")


def build(args):
    from calibration.methods.psn import PSNCalibrator

    return PSNCalibrator(
        hidden_dim=args.hidden_dim, embedding_dim=args.embedding_dim, learning_rate=args.learning_rate,
        weight_decay=args.weight_decay, batch_size=args.batch_size, max_epochs=args.epochs,
        ordered_asymptotes=not args.reference_head, validation_fraction=args.validation_fraction,
        patience=args.patience, prior_precision=args.prior_precision, tune_prior_precision=args.tune_prior_precision,
        curvature=args.curvature, temperature=args.temperature, dtype="float64" if args.float64 else "float32",
        rng=REFERENCE_SEED if args.seed is None else args.seed, progress=args.progress,
    )


def to_bank(cal, args):
    return cal.to_item_bank(args.bank_id, standardize=not args.native_scale, include_features=not args.no_features)


def summary(cal, data) -> str:
    text = (
        f"PSN-IRT: {data.n_subjects} subjects x {data.n_items} items, {cal.n_iter_} epochs in {cal.fit_seconds_:.1f} s "
        f"(final loss {cal.loss_curve_[-1]:.4f}); Laplace temperature {cal.temperature_:.4g}"
    )
    if cal.split_half_ is not None:
        text += f"\nsplit-half check at T = 1: {cal.split_half_.summary()}"
    return text
