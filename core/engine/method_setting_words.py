"""The method settings whose words differ by method (:data:`PER_METHOD`): one name meaning different
things (``num_samples`` is kept HMC iterations, MC-dropout passes, or VI draws), or a shared
setting with a method's own range or choices (:data:`core.engine.setting_words.COMMON`'s words,
changed). A table without torch."""

from __future__ import annotations

from dataclasses import replace

from core.engine.setting_words import COMMON, SettingHelp

_CURVATURE_INIT = replace(
    COMMON["init"],
    tooltip=COMMON["init"].tooltip + " With moves scaled by the curvature at the mode (not layer by layer), "
    "also: spread around the most probable weights by twice the posterior's own width, so that "
    "chains that end up agreeing have come from different places.",
    choices={**COMMON["init"].choices, "overdispersed": "spread around the mode"},
)
_SG_METRIC = SettingHelp(
    "Scale the steps by the curvature",
    "None: every weight moves by the same step size. By the curvature: first find the most "
    "probable weights and how sharply the data pin down each direction there, then move along "
    "the pinned directions in small steps and along the free ones in large ones, however the "
    "weights are correlated; the scaling is fixed before the first step, so the draws still "
    "target the posterior. Needs memory for a weights × weights matrix, so small models only "
    "(softmax regression). Layer by layer: the same for a network, each layer's curvature "
    "approximated by two small matrices (K-FAC), found around the best weights of a short "
    "training run; correlations between layers are left out. Either replaces “Adapt the step "
    "per weight”.",
    choices={"identity": "none", "curvature": "by the curvature at the mode",
             "kron": "by the curvature, layer by layer"},
    advanced=True,
)

#: Help that differs by method: (method, setting) → help.
PER_METHOD: dict[tuple[str, str], SettingHelp] = {
    ("sgld", "metric"): _SG_METRIC,
    ("sghmc", "metric"): _SG_METRIC,
    ("dsghmc", "metric"): replace(_SG_METRIC, tooltip=_SG_METRIC.tooltip + " The curvature is that of the model "
                                  "on clean inputs, not of the posterior the input masks make; it still changes "
                                  "only how far a step goes."),
    ("mc_dropout", "num_samples"): SettingHelp(
        "Passes at prediction",
        "How many times each input is passed through the network with random units switched "
        "off (T). More passes give smoother histograms and take longer per input.",
        unit="passes", minimum=1, maximum=100_000,
    ),
    ("hmc", "init"): _CURVATURE_INIT,
    ("sgld", "init"): _CURVATURE_INIT,
    ("sghmc", "init"): _CURVATURE_INIT,
    ("hmc", "num_samples"): SettingHelp(
        "Kept iterations",
        "Iterations run after warm-up; their draws are kept (every “iterations between kept "
        "draws”-th).",
        unit="iterations", minimum=1, maximum=1e7,
    ),
    ("hmc", "thin"): replace(
        COMMON["thin"],
        label="Iterations between kept draws",
        tooltip="Keep one weight sample every this many iterations (thinning).",
        unit="iterations",
    ),
    ("hmc", "step_size"): replace(
        COMMON["step_size"],
        label="Starting step size",
        tooltip="The size ε of each leapfrog move at the start; warm-up tunes it when "
        "“Tune the step size” is on.",
    ),
    ("hmc", "num_chains"): replace(
        COMMON["num_chains"],
        tooltip="How many independent samplers run side by side. Each evaluates the whole "
        "training set many times per iteration.",
    ),
    ("mfvi", "sampling"): replace(
        COMMON["sampling"],
        choices={"naive": "independent", "paired": "mirrored pairs"},
        shown_when=("local_reparam", False),
    ),
    ("mfvi", "num_samples"): replace(COMMON["num_samples"], shown_when=("local_reparam", False)),
    ("snvi", "rank"): replace(COMMON["rank"], minimum=1),
    ("laplace", "epochs"): replace(
        COMMON["epochs"], label="Passes to the best weights",
        tooltip="Passes over the training images that find the best weights (as MAP does); the "
        "Gaussian is then fitted around them.",
        minimum=0,
    ),
    ("laplace", "subset"): SettingHelp(
        "Weights that vary",
        "Which weights get a spread: the output layer only (fast, the usual choice) or every "
        "weight of the network. The others stay at their best values.",
        choices={"last_layer": "output layer", "all": "all layers"},
    ),
    ("laplace", "structure"): SettingHelp(
        "Shape of the spread",
        "How the curvature of the loss is stored: per layer as two small factors (Kronecker), "
        "one number per weight (diagonal), or the whole matrix (full, only for a few thousand "
        "weights: its size is checked before it is built).",
        choices={"kron": "Kronecker factors", "diag": "diagonal", "full": "full matrix"},
    ),
    ("laplace", "prior_precision"): SettingHelp(
        "Width of the prior",
        "How strongly the prior pulls the weights to zero, which sets the Gaussian's overall "
        "width: chosen to make the training data most probable (marginal likelihood), or taken "
        "from the prior spread above.",
        choices={"marglik": "fitted to the data", "prior": "from the prior spread"},
    ),
    ("laplace", "predictive"): SettingHelp(
        "Prediction",
        "Average the predictions of weight draws, or use the probit formula: one exact-in-"
        "closed-form prediction without draws (output layer only; the column then shows no "
        "spread over draws).",
        choices={"sample": "weight draws", "probit": "probit formula"},
    ),
    ("laplace", "memory_budget_mb"): replace(
        COMMON["memory_budget_mb"], label="Memory for the curvature",
        tooltip="The most memory the curvature matrix may take. A larger one is refused "
        "before it is built, with a cheaper shape suggested.",
    ),
    ("swag", "epochs"): replace(
        COMMON["epochs"], label="Passes to the best weights",
        tooltip="Passes over the training images that first find one best set of weights (as MAP "
        "does) before the averaging starts.",
    ),
    ("swag", "swa_epochs"): SettingHelp(
        "Passes of averaging",
        "Passes over the training images after the best weights are found, during which the "
        "weights keep moving around them and snapshots are taken.",
        unit="passes", minimum=1, maximum=100_000,
    ),
    ("swag", "swa_lr"): SettingHelp(
        "Averaging step size",
        "The constant learning rate of the averaging passes (plain SGD). Larger steps wander "
        "further from the best weights, so the fitted spread is wider.",
        minimum=1e-7, maximum=10.0, log_scale=True,
    ),
    ("swag", "momentum"): SettingHelp(
        "Momentum",
        "How much of the previous step each averaging step keeps (SGD momentum, between 0 and 1).",
        minimum=0.0, maximum=0.999, decimals=3, advanced=True,
    ),
    ("swag", "snapshots_per_epoch"): SettingHelp(
        "Snapshots per pass",
        "How many times per averaging pass the weights are recorded. Their mean is the centre "
        "of the fitted Gaussian, their spread its width.",
        unit="snapshots", minimum=1, maximum=10_000,
    ),
    ("swag", "rank"): SettingHelp(
        "Shared directions",
        "How many of the last snapshots shape the directions the weights vary along together "
        "(the rank K of the low-rank part). At least 2, at most the number of snapshots.",
        unit="directions", minimum=2, maximum=512,
    ),
}
