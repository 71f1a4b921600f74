"""Every method setting that several methods share, in words: a label, what it does, its unit, its
sensible range (:class:`SettingHelp`, one per setting name, in :data:`COMMON`).

The config dataclasses in :mod:`core.engine.inference` name their fields in the papers' terms
(``step_size``, ``burn_in_epochs``, ``init_factor_std``) and document them for programmers.
A settings form needs more: a label a non-specialist can read, a tooltip saying what the
knob changes and in which unit, the range a spin box should allow, the words for each
choice of a ``Literal`` field, and whether the setting matters at all given the others
(the RMSprop constants only with the preconditioner on). The words of a name that means
different things in different methods are in :mod:`core.engine.method_setting_words`; the
lookups a form uses are in :mod:`core.engine.settings_help`. A table without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SettingHelp:
    """How to show one setting.

    Attributes
    ----------
    label
        Words on screen.
    tooltip
        What the setting does, for someone who never read the paper.
    unit
        The unit of a number, plural (``"images"``, ``"MB"``), or ``""`` for a pure number.
    minimum, maximum
        The range a spin box allows (the config may still refuse some combinations).
    decimals
        Digits after the point for numbers on a linear scale.
    log_scale
        The number spans decades (step sizes, learning rates): shown in scientific notation.
    special
        Words shown instead of the minimum value (``"never"`` for 0), or ``""``.
    choices
        Words for each value of a choice setting (value → words).
    shown_when
        ``(other_setting, value)``: the setting only matters when the other has that value.
    advanced
        A fine-tuning knob most people leave alone; listed after the others.
    """

    label: str
    tooltip: str
    unit: str = ""
    minimum: float = 0.0
    maximum: float = 1e9
    decimals: int = 2
    log_scale: bool = False
    special: str = ""
    choices: dict[str, str] | None = None
    shown_when: tuple[str, Any] | None = None
    advanced: bool = False


_PRIOR_STD = SettingHelp(
    "Prior spread of the weights",
    "How far the weights may stray from zero before the prior pulls them back: the standard "
    "deviation σ of the Gaussian prior N(0, σ²) on every weight and bias. Smaller values "
    "mean a stronger pull towards zero (more regularisation).",
    minimum=1e-4, maximum=1e4, log_scale=True,
)
_EPOCHS = SettingHelp(
    "Passes over the data",
    "How many times training goes through all training images (epochs). More passes take "
    "proportionally longer.",
    unit="passes", minimum=1, maximum=100_000,
)
_BATCH_SIZE = SettingHelp(
    "Images per step",
    "How many training images each update looks at (the mini-batch size). Larger batches "
    "give smoother but slower steps, and fewer steps per pass.",
    unit="images", minimum=1, maximum=60_000,
)
_LR = SettingHelp(
    "Learning rate",
    "How big each optimisation step is (Adam's learning rate; it is lowered smoothly to zero "
    "by the end of training). Too large and training diverges; too small and it crawls.",
    minimum=1e-7, maximum=10.0, log_scale=True,
)
_PREDICT_SAMPLES = SettingHelp(
    "Draws at prediction",
    "How many weight sets are drawn from the fitted distribution when the posterior predicts. "
    "More draws give smoother histograms and take longer per input.",
    unit="draws", minimum=1, maximum=100_000,
)
_MEMORY = SettingHelp(
    "Memory for stored draws",
    "The most memory the kept weight samples may take; each draw is one copy of all the "
    "network's weights. If the planned draws do not fit, training either refuses to start or "
    "keeps fewer draws (see the next setting). The default suits a laptop; raise it only for "
    "long runs of a large network.",
    unit="MB", minimum=1, maximum=1_000_000, decimals=0, advanced=True,
)
_ON_BUDGET = SettingHelp(
    "When the draws do not fit",
    "What happens when the planned draws would need more memory than allowed: “refuse to "
    "start” says so before any training; “keep fewer draws” keeps every n-th draw so that "
    "they fit, and the run ends with fewer draws than planned.",
    choices={"refuse": "refuse to start", "thin": "keep fewer draws"},
    advanced=True,
)
_INIT = SettingHelp(
    "Starting weights",
    "Where each chain starts: the network's usual random initialisation, or a random draw from "
    "the prior (what the D-SGHMC authors did).",
    choices={"default": "usual initialisation", "prior": "a draw from the prior"},
    advanced=True,
)
_NUM_CHAINS = SettingHelp(
    "Chains",
    "How many independent samplers run side by side. Their agreement shows whether sampling "
    "has settled; every chain adds draws and time.",
    unit="chains", minimum=1, maximum=256,
)
_PRECONDITION = SettingHelp(
    "Adapt the step per weight",
    "Scale each weight's step by a running average of its squared gradients (RMSprop "
    "preconditioning), so flat and steep directions move at similar speed.",
)
_RMS_DECAY = SettingHelp(
    "Gradient average memory",
    "How slowly the running average of squared gradients forgets (ρ; 0.99 remembers about "
    "the last 100 steps).",
    minimum=0.0, maximum=0.9999, decimals=4, shown_when=("precondition", True), advanced=True,
)
_RMS_EPSILON = SettingHelp(
    "Preconditioner floor",
    "A small number added to the gradient average so that weights with tiny gradients do not "
    "get huge steps (λ).",
    minimum=1e-12, maximum=1.0, log_scale=True, shown_when=("precondition", True), advanced=True,
)
_RMS_ADAPT = SettingHelp(
    "Adapt the scaling for",
    "Steps during which the per-weight scaling keeps adapting; afterwards it is frozen, which "
    "makes the sampler exact. “Throughout” adapts for the whole run, as published "
    "(slightly approximate).",
    unit="steps", minimum=-1, maximum=1e9, special="throughout",
    shown_when=("precondition", True), advanced=True,
)
_SG_STEP = SettingHelp(
    "Step size",
    "How far each update moves the weights (the learning rate η of the sampler). Too large "
    "and the chains blow up; too small and they barely move. Typical values for MNIST are "
    "10⁻⁶ to 10⁻⁴.",
    minimum=1e-12, maximum=1.0, log_scale=True,
)
_BURN_IN = SettingHelp(
    "Passes discarded first",
    "Passes over the data run before any draw is kept, while the chains travel from their "
    "starting point to where the posterior has its mass (burn-in). Must be fewer than the "
    "passes in total.",
    unit="passes", minimum=0, maximum=100_000,
)
_SG_THIN = SettingHelp(
    "Steps between kept draws",
    "Keep one weight sample every this many steps (thinning): neighbouring steps are nearly "
    "identical, so keeping all of them costs memory without adding information. Larger values "
    "keep fewer, more different draws; 1 keeps every step.",
    unit="steps", minimum=1, maximum=1e9,
)
_VI_NUM_SAMPLES = SettingHelp(
    "Weight draws per step",
    "How many weight sets are drawn to estimate the training objective (the ELBO) at each "
    "step. More draws give less noisy steps and take longer.",
    unit="draws", minimum=1, maximum=1000,
)
_VI_SAMPLING = SettingHelp(
    "How draws are paired",
    "How the weight draws of one step are chosen: independently, in mirrored pairs around the "
    "mean (their noise cancels), or as a balanced set along the learned directions "
    "(unscented; sN-VI and mixtures only).",
    choices={
        "naive": "independent",
        "paired": "mirrored pairs",
        "unscented": "balanced set (unscented)",
    },
)

_OPTIMISER = SettingHelp(
    "How the best weights are found",
    "Newton steps go all the way to the single best set of weights of a model without hidden "
    "layers (softmax regression), stopping at a stated tiny slope; L-BFGS does the same for any "
    "small model; Adam trains for the set number of passes, as networks are trained. Automatic "
    "picks Newton where it applies and Adam otherwise.",
    choices={"auto": "automatic", "newton": "Newton steps, to the best weights",
             "lbfgs": "L-BFGS, to the best weights", "adam": "Adam, for the set passes"},
)
_GRAD_TOL = SettingHelp(
    "Stop at slope",
    "Newton and L-BFGS stop when the slope of the log posterior (the length of its gradient, "
    "summed over all training images) is below this: at 0.001 the weights are as good as the "
    "best ones to far less than a thousandth of a nat.",
    minimum=1e-12, maximum=1e6, log_scale=True, advanced=True,
)
_MAX_ITER = SettingHelp(
    "Most Newton or L-BFGS steps",
    "Newton and L-BFGS stop after this many steps even if the slope is not yet small (the file "
    "then says it did not reach the best weights).",
    unit="steps", minimum=1, maximum=100_000, advanced=True,
)

#: Help shared by every method that has the setting.
COMMON: dict[str, SettingHelp] = {
    "prior_std": _PRIOR_STD,
    "epochs": _EPOCHS,
    "batch_size": _BATCH_SIZE,
    "lr": _LR,
    "predict_samples": _PREDICT_SAMPLES,
    "memory_budget_mb": _MEMORY,
    "optimiser": _OPTIMISER,
    "grad_tol": _GRAD_TOL,
    "max_iter": _MAX_ITER,
    "on_budget": _ON_BUDGET,
    "init": _INIT,
    "num_chains": _NUM_CHAINS,
    "precondition": _PRECONDITION,
    "rms_decay": _RMS_DECAY,
    "rms_epsilon": _RMS_EPSILON,
    "rms_adapt_steps": _RMS_ADAPT,
    "step_size": _SG_STEP,
    "burn_in_epochs": _BURN_IN,
    "thin": _SG_THIN,
    "length_scale": SettingHelp(
        "Prior length-scale",
        "How smooth the network's answers should be before it has seen any data (l): a larger "
        "length-scale pulls the weights harder towards zero, so similar images get similar "
        "answers. With the model precision and the drop rate it sets the weight decay "
        "λ = (1 − drop rate)·l²/(2Nτ) (Gal & Ghahramani). Leave it at the default unless the "
        "posterior overfits (raise it) or cannot fit the training images (lower it).",
        minimum=1e-4, maximum=1e4, log_scale=True,
    ),
    "tau": SettingHelp(
        "Model precision",
        "How much the model trusts the training labels (τ): a large precision says the labels are "
        "almost never wrong. Larger values mean less weight decay and a narrower predictive spread "
        "(1/τ is added to every prediction's variance). Lower it if the posterior is too sure of "
        "itself on images unlike the training ones.",
        minimum=1e-4, maximum=1e8, log_scale=True,
    ),
    "schedule": SettingHelp(
        "Step-size schedule",
        "Keep the step size fixed, or let it shrink over time as ηₜ = η₀ (b / (b + t))^γ.",
        choices={"constant": "constant", "polynomial": "shrinking"},
    ),
    "decay_offset": SettingHelp(
        "Shrinking starts after",
        "b of the shrinking schedule: roughly how many steps pass before the step size has "
        "halved a first time.",
        unit="steps", minimum=1e-3, maximum=1e9, log_scale=True,
        shown_when=("schedule", "polynomial"),
    ),
    "decay_power": SettingHelp(
        "Shrinking speed",
        "γ of the shrinking schedule; theory asks for a value between 0.5 and 1.",
        minimum=0.0, maximum=1.0, decimals=2, shown_when=("schedule", "polynomial"),
    ),
    "temperature": SettingHelp(
        "Temperature",
        "Scales the random noise the sampler adds at every step: 1 samples the posterior itself, "
        "0 turns the sampler into plain gradient ascent (one network, no spread), values between "
        "0 and 1 give a sharper (“cold”) posterior that is more sure of itself. Leave it at 1 "
        "unless you mean to compare with a cold posterior.",
        minimum=0.0, maximum=100.0, decimals=2, advanced=True,
    ),
    "friction": SettingHelp(
        "Friction",
        "The fraction of momentum lost at each step (α, between 0 and 1). More friction makes "
        "the chains more stable but slower to explore.",
        minimum=0.001, maximum=1.0, decimals=3,
    ),
    "noise_estimate": SettingHelp(
        "Gradient-noise estimate",
        "How much noise the mini-batch gradients already bring (β̂); that much less noise is "
        "injected. Must be smaller than the friction; 0 is the safe choice.",
        minimum=0.0, maximum=0.999, decimals=3, advanced=True,
    ),
    "mass": SettingHelp(
        "Mass",
        "The sampler's inertia (M); the effective step size is step size ÷ mass.",
        minimum=1e-4, maximum=1e4, log_scale=True, advanced=True,
    ),
    "resample_every": SettingHelp(
        "Redraw momentum every",
        "Forget the momentum and draw it afresh every this many steps, as Chen et al. suggest.",
        unit="steps", minimum=0, maximum=1e9, special="never", advanced=True,
    ),
    "drop_rate": SettingHelp(
        "Input drop rate",
        "The share of input pixels hidden at random at every step (a fresh mask each time). "
        "The paper's “p = 0.5” keeps half of the pixels, so it is a drop rate of 0.5.",
        minimum=0.0, maximum=0.95, decimals=2,
    ),
    "mask_at_prediction": SettingHelp(
        "Hide pixels at prediction too",
        "Keep hiding random input pixels when predicting (the authors' code does this); off "
        "predicts from the whole image.",
    ),
    "num_warmup": SettingHelp(
        "Warm-up iterations",
        "Iterations spent tuning the step size and the scale of each weight; they are not kept.",
        unit="iterations", minimum=0, maximum=1e7,
    ),
    "num_leapfrog": SettingHelp(
        "Leapfrog steps per iteration",
        "How many small moves make one proposal (L). Each needs the gradient over the whole "
        "training set, so time grows in proportion.",
        unit="steps", minimum=1, maximum=10_000,
    ),
    "trajectory_length": SettingHelp(
        "Trajectory length",
        "How far one proposal travels, in the posterior's own spread (with the curvature metric): "
        "each chain then takes as many leapfrog steps as its step size needs, at most the "
        "leapfrog steps above. About 1.6 (a quarter turn) leaves each draw nearly independent of "
        "the last in both its value and its spread; much longer swings back. 0 takes that many "
        "steps always.",
        minimum=0.0, maximum=100.0, decimals=2, advanced=True,
    ),
    "step_size_jitter": SettingHelp(
        "Step-size randomness",
        "Each iteration multiplies the step size by a random factor between 1 − j and 1 + j "
        "(j is this value), so that no chain keeps circling back to where it started. 0 turns "
        "it off.",
        minimum=0.0, maximum=0.99, decimals=2, advanced=True,
    ),
    "target_accept": SettingHelp(
        "Target acceptance rate",
        "The share of proposals warm-up aims to accept (δ) by tuning the step size. 0.8 is a "
        "good default; higher means smaller, safer steps.",
        minimum=0.05, maximum=0.99, decimals=2,
    ),
    "adapt_step_size": SettingHelp(
        "Tune the step size",
        "Adjust the step size during warm-up so that about the target share of proposals is "
        "accepted. Off keeps the starting step size.",
    ),
    "adapt_mass": SettingHelp(
        "Tune the scale of each weight",
        "Measure during warm-up how much each weight varies and move each in proportion "
        "(a diagonal mass matrix).",
        shown_when=("metric", "diagonal"),
    ),
    "metric": SettingHelp(
        "How moves are scaled",
        "Per weight: learn during warm-up how much each weight varies and move each in "
        "proportion. By the curvature: first find the most probable weights, then move along "
        "the directions the data pin down in small steps and along those they leave free in "
        "large ones, however the weights are correlated (needs memory for a weights × weights "
        "matrix, so small models only). By the curvature's main directions: the same, but only "
        "the directions pinned down far more or less than most are kept apart and the rest are "
        "treated alike, so each step costs much less when most directions are alike.",
        choices={"diagonal": "per weight", "curvature": "by the curvature at the mode",
                 "curvature-lowrank": "by the curvature's main directions (cheaper)"},
    ),
    "max_energy_error": SettingHelp(
        "Divergence threshold",
        "A proposal whose energy error exceeds this is counted as diverged and rejected.",
        minimum=1e-2, maximum=1e9, log_scale=True, advanced=True,
    ),
    "num_members": SettingHelp(
        "Networks",
        "How many networks are trained, each from its own random start. Time grows in "
        "proportion.",
        unit="networks", minimum=1, maximum=1000,
    ),
    "prior": SettingHelp(
        "Prior shape",
        "The prior belief about each weight: a Gaussian bell, or a Student-t with heavier tails "
        "that tolerates a few large weights.",
        choices={"gaussian": "Gaussian", "student_t": "Student-t (heavy tails)"},
    ),
    "prior_df": SettingHelp(
        "Prior tail weight",
        "Degrees of freedom ν of the Student-t prior: smaller means heavier tails; large values "
        "approach the Gaussian.",
        minimum=0.1, maximum=1000.0, decimals=1, shown_when=("prior", "student_t"),
    ),
    "init_std": SettingHelp(
        "Starting spread",
        "The standard deviation σ every weight starts with (its mean starts at the network's "
        "usual initialisation).",
        minimum=1e-8, maximum=10.0, log_scale=True, advanced=True,
    ),
    "sampling": _VI_SAMPLING,
    "num_samples": _VI_NUM_SAMPLES,
    "local_reparam": SettingHelp(
        "Sample activations, not weights",
        "Give every image its own draw of the weights, drawing each layer's outputs directly "
        "where that is exact (local reparameterisation, Kingma et al. 2015): less noisy than "
        "one weight draw shared by the whole batch.",
    ),
    "rank": SettingHelp(
        "Shared directions",
        "How many directions the weights may vary along together (the rank K of the low-rank "
        "covariance). 0 means every weight varies on its own.",
        unit="directions", minimum=0, maximum=512,
    ),
    "init_factor_std": SettingHelp(
        "Starting size of the directions",
        "Standard deviation of the random starting values of the shared directions.",
        minimum=0.0, maximum=1.0, log_scale=True, advanced=True,
    ),
    "factor_lr": SettingHelp(
        "Learning rate of the directions",
        "Adam's learning rate for the shared directions (smaller than the main learning rate "
        "keeps them stable).",
        minimum=1e-9, maximum=1.0, log_scale=True, advanced=True,
    ),
    "components": SettingHelp(
        "Mixture components",
        "How many Gaussians the mixture has; each can settle on a different set of good weights.",
        unit="components", minimum=1, maximum=64,
    ),
    "min_share": SettingHelp(
        "Least weight per component",
        "Every Gaussian of the mixture keeps at least this share of an equal weight (0.5: at "
        "least half of 1/components), so that each gives its part of the draws. At 0 the "
        "weights are free and may all go to one Gaussian, a mixture in name only.",
        minimum=0.0, maximum=1.0, decimals=2, advanced=True,
    ),
    "alpha": SettingHelp(
        "Learned noise per",
        "Learn one dropout noise level for every single weight, or one shared by all weights "
        "leaving the same input unit.",
        choices={"per_weight": "weight", "per_unit": "input unit"},
    ),
    "init_alpha": SettingHelp(
        "Starting noise level",
        "The dropout noise α every weight starts with (α = r/(1 − r) for a drop rate r: 0.25 is "
        "like dropping 20%, 1 like dropping 50%).",
        minimum=1e-4, maximum=1.0, log_scale=True,
    ),
    "alpha_lr": SettingHelp(
        "Learning rate of the noise",
        "Adam's learning rate for the learned noise levels.",
        minimum=1e-7, maximum=10.0, log_scale=True, advanced=True,
    ),
}
