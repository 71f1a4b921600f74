"""The ``bayescope-cli train`` settings each method takes in a tier of ``bayescope-cli zoo``.

Each method's registry entry (:data:`core.engine.inference.METHODS`) names its settings per tier
from these building blocks; :mod:`core.commands.zoo` runs them. The numbers and why they were
chosen are measured in docs/zoo.md.
"""

from __future__ import annotations


def chain_settings(thin: int, init: str, epochs: int = 50, burn_in: int = 15, chains: int = 4) -> tuple[str, ...]:
    """The ``train`` settings of a tier's samplers: ``chains`` chains of ``epochs`` epochs, ``burn_in``
    of them not kept, every ``thin``-th step kept after."""
    return ("--set", f"num_chains={chains}", "--set", f"epochs={epochs}", "--set", f"burn_in_epochs={burn_in}",
            "--set", f"thin={thin}", "--set", f"init={init}")


#: The paper tier's D-SGHMC chains: 500 epochs, 150 of burn-in, every 250th step measured
#: (4 × 840 draws: R̂ 1.008, bulk ESS 1,398) and 30 of each chain's kept. Over 50 epochs its chains
#: roughly agreed (R̂ 1.035 over 4 × 210 draws) and its 4 × 30 draws alone could not tell (1.14, as
#: they gave shuffled). The chains start from prior draws: weights the data hardly constrain (those
#: of pixels that are blank in almost every image) then start where the posterior keeps them,
#: instead of random-walking there from a near-zero start for longer than the run (SGLD from the
#: default start, 30 epochs: R̂ 1.58 on the probe, the weights' norm still rising).
DSGHMC_CHAINS = (*chain_settings(thin=250, init="prior", epochs=500, burn_in=150), "--keep-draws", "30")
#: The paper tier's SGLD and SGHMC move by the posterior's curvature at its mode (``metric=curvature``,
#: the metric HMC uses, fixed before the first step), their chains started around the mode as
#: HMC's. Plain, their step was bounded by the stiffest direction (precision 62,109) while the
#: loosest (precision 1) relaxed over 67,000 steps, and the noise of mini-batches of 100 spread
#: their draws 1,700 below HMC's log-posterior level, as predicted from the curvature
#: (``benchmarks/measure_sampler_bias.py --predict``; docs/zoo.md). Steps are in units of the
#: posterior's own spread: a linear function of the weights forgets in about 4/η steps (SGLD) or
#: 2α/η (SGHMC, friction α). Each file keeps 30 of each chain's draws; R̂ and ESS come from all
#: the run's measured draws.
SG_CURVATURE = ("--set", "metric=curvature", "--keep-draws", "30")
#: SGLD at η 0.05 on mini-batches of 10,000 (forgets in about 80 steps): 6,717 epochs of 6 steps, 50
#: of burn-in, every 40th step measured (4 × 1,000 draws: R̂ 1.009, 74 min on two cores with
#: ``--cluster local``). SGLD keeps every step without an accept/reject test, so even with exact
#: gradients its draws spread 1/√(1 − η/4) of the posterior's in every direction (0.6 % at 0.05):
#: over 7,850 weights their log posterior sits about 50 below HMC's (measured 47). At η 0.01
#: (mini-batches of 2,000, 700 epochs) the chains only roughly agreed (R̂ 1.087 over 4 × 201); at
#: η 0.1 (2,717 epochs) R̂ was 1.011 with the draws 116 below HMC's level (101 from the step).
SGLD_CHAINS = (*chain_settings(thin=40, init="overdispersed", epochs=6717, burn_in=50),
               "--set", "batch_size=10000", *SG_CURVATURE)
#: SGHMC at η 4·10⁻³ with friction 0.12, about critically damped (forgets in about 60 steps), on
#: mini-batches of 10,000 (6 steps an epoch), which keep the gradient's noise small beside the
#: injected noise (its draws at HMC's level in a pilot, −17,937 ± 63 against −17,941 ± 63, where
#: on mini-batches of 2,000 they lay 150 below): 4,550 epochs, 50 of burn-in, every 27th step
#: measured (4 × 1,000 draws: over 4 × 200 the largest of 10,000 R̂ values lies near 1.02 even
#: for perfectly mixed chains).
SGHMC_CHAINS = (*chain_settings(thin=27, init="overdispersed", epochs=4550, burn_in=50),
                "--set", "batch_size=10000", *SG_CURVATURE)
#: A network's chains start from its own initialisation, each drawn with its own seed: from a
#: draw of the prior SGLD's first steps overflowed (N(0, 1), step 1e-5: non-finite at step 4) or
#: killed every unit (N(0, 0.2²): the network predicted 1/10 for every class after 2 epochs).
SG_NETWORK_CHAINS = chain_settings(thin=840, init="default")  # 4 × 25 = 100 draws of LeNet-5
#: The network tier's D-SGHMC scales its steps weight by weight (RMSprop's preconditioner, Li et
#: al. 2016), learnt over the first 10 epochs and then held fixed, 5 epochs before the first draw
#: (a fixed preconditioner needs no correction term). Without it the weights the data leave free
#: relax towards the prior's spread in thousands of steps: plain SGLD (η 10⁻⁵, the largest that
#: kept the network alive: at 3·10⁻⁵ every unit died and it predicted 1/10 for every class) had
#: R̂ 2.39 after 10 epochs (benchmarks/measure_network_tuning.py; docs/zoo.md).
PRECONDITIONED = ("--set", "precondition=true", "--set", "rms_adapt_steps=6000")
#: The network tier's prior N(0, σ²) on every weight: σ = 0.2, where the Laplace evidence of
#: LeNet-5 (all weights, Kronecker-factored) peaks: precision 23.2 (σ 0.21) around the MAP of
#: N(0, 1), and 29.5 (σ 0.18) around the MAP of N(0, 0.2²) (MacKay's evidence framework; docs/zoo.md). Under
#: N(0, 1) the weights the data leave free drift towards a spread of 1 far slower than a run
#: (SGLD, 50 epochs: the weights' norm 30 → 110 and still rising, R̂ 2.14).
NETWORK_PRIOR_STD = 0.2
NETWORK_PRIOR = ("--set", f"prior_std={NETWORK_PRIOR_STD:g}")
#: The network tier's samplers move by the curvature, Kronecker-factored per layer (K-FAC at a
#: short MAP fit, plus the prior), fixed before the first step: on the validation split SGLD mixed
#: about six times faster per epoch than with RMSprop's preconditioner, SGHMC (η 5·10⁻⁵, friction
#: 0.1: as far per step as that SGLD) a little faster in a 10-epoch pilot, and D-SGHMC, with the
#: same settings and its input masks, reached R̂ 1.53 in 10 epochs (docs/zoo.md). 120 epochs, 15 of
#: burn-in, every 252nd step measured (4 × 250 draws) and 25 of each chain's kept. SGLD and SGHMC
#: reached R̂ 1.31 and 1.28, not the tier's 1.1: about 3.4 and 3.1 times the sampling would be
#: needed, and part of the chains' motion is slower still (docs/zoo.md). SGLD's η 10⁻³ ran at
#: seed 0 here but diverged at seed 1 and on a GPU; η 5·10⁻⁴ ran at four seeds (docs/zoo.md): the
#: next rebuild of SGLD should take it.
KRON_NETWORK_CHAINS = chain_settings(thin=252, init="default", epochs=120, burn_in=15)
#: The paper tier's MAP and deep-ensemble members: full-batch Newton steps to the mode, to a gradient
#: norm of 10⁻³ (``core.engine.inference.map``). Ten epochs of Adam stopped 2,804 nats of log posterior
#: below it (weight norm 14.6 against 37.0), and Laplace, SWAG and the ensemble inherited that start.
CONVERGED_MAP = ("--set", "optimiser=newton")
#: Laplace and SWAG of the paper tier start from the tier's own MAP file (``{map}``: zoo puts the
#: folder's ``<tier>_<model>_map.pt`` there), at the mode, instead of finding it again.
FROM_TIER_MAP = ("--start-from", "{map}")
#: The samplers keep their draws in float16 (predictions agree with float32 to 1e-3, tested).
HALF = ("--storage", "float16")
#: The tiers' names (:data:`core.commands.zoo.TIERS`).
PAPER = "paper"
NETWORK = "network"
#: A head on a person's own network's features: every method with the paper tier's settings
#: unless its registry entry names its own (the same softmax-regression model on other inputs).
FEATURES_TIER = "features"
FACES = "faces"

#: The face tier (:data:`FACES`): a softmax-regression head (1,032 weights) on dlib's 128-number
#: face descriptor, eight age groups, trained on UTKFace's fixed training split (docs/faces.md).
#: Its prior N(0, σ²) on every weight: σ = :data:`FACE_PRIOR_STD`, chosen from a first, partial
#: evidence grid; the full grid puts the exact Laplace evidence's peak at σ ≈ 4.4, 79 nats above
#: σ = 3 (benchmarks/measure_face_prior.py; docs/zoo.md, "The prior"): rebuilding the tier there
#: is this one number and ``zoo --tier faces``.
FACE_PRIOR_STD = 3.0
FACE_PRIOR = ("--set", f"prior_std={FACE_PRIOR_STD:g}")
#: The face tier's heads trained the usual way (MAP and the methods that start from it): Adam at
#: 0.01 on batches of 100 for 50 epochs. The descriptor's values vary by about 0.05, so the
#: weights that separate the groups are tens of units large: at the default 10⁻³ for 10 epochs
#: the fit is far from its mode.
FACE_TRAINING = ("--set", "epochs=50", "--set", "lr=0.01", "--set", "batch_size=100")
#: The face tier's SGLD and SGHMC: as the paper tier's, moving by the posterior's curvature at its
#: mode (exact for 1,032 weights), chains started at twice the posterior's spread around it, on
#: mini-batches of 4,000 faces (5 steps an epoch); every draw of the run is measured and 25 of
#: each chain's kept (4 × 25 = 100 draws in the file, 0.2 MB).
FACE_SG = ("--set", "batch_size=4000", "--set", "metric=curvature", "--keep-draws", "25", *FACE_PRIOR)

#: The features tier (:data:`FEATURES_TIER`)'s samplers take every step on all the training images
#: (batches of :data:`FEATURES_BATCH`, more than any folder a person brings: hundreds to ~50,000
#: images), so an epoch is one step whatever N is and their lengths below are *steps*. The paper
#: tier's settings counted epochs of 10,000-image batches, so on a folder of 8,026 images SGLD ran
#: 6,717 steps and on 60,000 six times that; here every folder gets the same chain. That is right
#: because the chains move by the posterior's curvature at its mode (``metric=curvature``, exact
#: for a softmax head), so a step's reach, in units of the posterior's own spread, does not depend
#: on N or on the feature length D; a step costs in proportion to N·D (a gradient over all images)
#: plus (DK)² (the metric's triangular products). Chains start at twice the posterior's spread
#: around the mode (``init=overdispersed``), as the face tier's.
FEATURES_BATCH = 50_000
#: SGLD, SGHMC and D-SGHMC run eight chains: a step reads the metric's 105 MB factor twice whatever
#: the number of chains (one triangular solve with the chains as right-hand sides), so a chain-step
#: costs about 12.7 ms of CPU with 8 against 21 with 4 (512 features, load 9). Chains that mix read
#: R̂ at the floor their number of draws sets (8 × 200 draws of the probe's 10,000 probabilities,
#: shuffled: 1.012), so R̂ ≤ 1.01 with margin is a matter of draws: 8 × 300 to 400 (below). Measured with
#: ``benchmarks/measure_sg_feature_head.py`` on ``bench_feature_tier.py``'s 8,026 × 512 features
#: (docs/performance.md, "Building a feature tier", 2026-11-29). Every file keeps 25 draws a chain.
FEATURES_SG_CHAINS = 8
#: The features tier's longest methods, in CPU seconds at 8,026 training images × 512 features (one
#: thread; docs/performance.md, "Building a feature tier"): ``zoo --jobs`` hands the methods out
#: longest first, and those not named here (each well under a minute) after them. D-SGHMC's and
#: SGHMC's are their workers' CPU in the whole build near idle (3.5 and 2.2 minutes, beside HMC);
#: SGLD's is that build's 384 s at 4,200 steps less 500 steps at 57.7 ms (an estimate); HMC's its
#: low-rank metric's run alone at load 6–18.
FEATURES_SECONDS = {"hmc": 388, "sgld": 355, "dsghmc": 210, "sghmc": 132}
FEATURES_SG = ("--set", f"batch_size={FEATURES_BATCH}", "--set", "metric=curvature", "--keep-draws", "25")
#: SGLD at η 0.4 (its draws 1/√(1 − η/4) = 5 % wider than the posterior's: no accept/reject step):
#: a linear function forgets in about 4/η = 10 steps where the posterior is as wide as the curvature
#: says, but in s² times that along a direction s times wider, and 8 chains × 1,000 steps read bulk
#: ESS 147 (R̂ 1.040). 200 + 4,000 steps, every 10th measured (8 × 400), seed 0: R̂ 1.0069 (bulk;
#: tail 1.0054; shuffled 1.0063), bulk / tail ESS 1,894 / 2,071, 415 s of CPU and 63 s for the probe
#: pass at load 5–8; its first 2,000 kept steps read 1.015. Seed 1: R̂ 1.0062 (shuffled 1.0063), bulk
#: ESS 1,843, 338 s + 52 s at load 6–7. Whitened by the curvature its draws have variances of median
#: 1.12 on both seeds (1/(1 − η/4) = 1.11 predicted). **Now 200 + 3,500 steps (8 × 350)**, an eighth
#: less: R̂ 1.0094 (seed 0; tail 1.0077, shuffled 1.0085, bulk / tail ESS 1,644 / 1,729) and 1.0082
#: (seed 1; shuffled 1.0079, ESS 1,619), 214 s of CPU and 9 s for the probe pass at load 6–8. At
#: 200 + 3,000 (8 × 300) seed 0 read 1.0108 (seed 1 1.0091): the ESS, set by the steps (about 17 a
#: bulk effective draw), not by the thinning, holds R̂ up; whitened variances median 1.12 at every length.
FEATURES_SGLD = (*chain_settings(thin=10, init="overdispersed", epochs=3700, burn_in=200, chains=FEATURES_SG_CHAINS),
                 *FEATURES_SG, "--set", "step_size=0.4")
#: SGHMC at η 0.15, friction 0.3, underdamped: on a Gaussian a linear function forgets in 2·friction/η
#: = 4 steps (the former 0.1 / 0.6: 12) and its square, which the folded tail R̂ sees, in about
#: 1/friction; its draws spread 2.3 % wider than the posterior's (the stationary spread of its update
#: on a Gaussian; 1.8 % before). 8 chains × 1,000 steps: R̂ 1.0105 (the same draws shuffled 1.0117),
#: bulk ESS 1,163, 6.9 steps an effective draw (the former settings: 22.7). 100 + 2,000 steps, every
#: 5th measured (8 × 400): R̂ 1.0049 (bulk 1.0048, tail 1.0049; shuffled 1.0072), bulk / tail ESS
#: 2,446 / 2,087, 204 s of CPU and 66 s for the probe pass at load 8 (seed 0; seed 1: 1.0057, shuffled
#: 1.0058, ESS 2,426, 204 + 57 s). Now 100 + 1,500 steps (8 × 300), a quarter less: R̂ 1.0077 (seed 0;
#: shuffled 1.0083, bulk ESS 1,843, 120 + 39 s at load 3) and 1.0081 (seed 1; shuffled 1.0086, ESS
#: 1,794, 116 + 36 s), below the floor of their draws shuffled. The draws whitened by the curvature
#: have variances of median 1.06 (HMC's: 1.00).
FEATURES_SGHMC = (*chain_settings(thin=5, init="overdispersed", epochs=1600, burn_in=100, chains=FEATURES_SG_CHAINS),
                  *FEATURES_SG, "--set", "step_size=0.15", "--set", "friction=0.3")
#: D-SGHMC takes SGHMC's step and friction, with the paper's drop rate 0.5 on the features (MC
#: dropout's here), on mini-batches of 1,000: its masks are drawn per image and chain, so each chain
#: gathers and masks its own batch, and on full batches that took 1,000 s for 4,200 steps at 64
#: features where SGHMC took 65 s. Its length is therefore in epochs: 235 with 12 of burn-in, 2,115
#: steps on 8,026 images, more on a larger folder (cost in proportion to N, as a step's is above). The
#: noise of its masked mini-batch gradients comes on top of the injected noise and nothing subtracts
#: it (the paper's Algorithm 1), so its draws are far wider than its own target, the posterior its
#: masks make: whitened by the curvature their variances have median 83 (quartiles 47–183, 1st–99th
#: percentile 15–1,481), and Stein's identity puts them at about 50 times that target's temperature
#: (52 ± 12; the same mini-batches without masks: about 10). Friction 0.6 at the same steps cools
#: them (median 28) but reads R̂ 1.0108 (ESS 1,055: a linear function forgets in 8 steps, not 4) and
#: still samples far too wide, so 0.3 stays (docs/zoo.md, "What D-SGHMC's column is"). 8 chains,
#: seed 0: R̂ 1.0044 (bulk and
#: tail; shuffled 1.0078), bulk / tail ESS 1,974 / 1,934 of 8 × 401, 230 s of CPU and 136 s for the
#: probe pass (its masks) at load 8–12; seed 1: 1.0047 (shuffled 1.0069), ESS 1,949, 225 + 98 s.
#: **Now 12 + 167 epochs (1,611 steps, 8 × 300)**, for the tier's 15 minutes: R̂ 1.0064 (bulk and
#: tail; shuffled 1.0081), bulk / tail ESS 1,510 / 1,436, 143 s of CPU and 41 s for the probe pass at
#: load 6–10 (seed 0; its first half, 8 × 150, 1.0134); seed 1: R̂ 1.0095 (bulk and tail; shuffled
#: 1.0091), bulk / tail ESS 1,536 / 1,513, 106 s of CPU and 21 s for the probe pass at load 10–12 (its
#: first half 1.0109): under 1.01 on both seeds, by 0.0005 on seed 1.
FEATURES_DSGHMC = (*chain_settings(thin=5, init="overdispersed", epochs=179, burn_in=12, chains=FEATURES_SG_CHAINS),
                   "--set", "batch_size=1000", "--set", "metric=curvature", "--keep-draws", "25",
                   "--set", "step_size=0.15", "--set", "friction=0.3", "--drop-rate", "0.5")
#: HMC with the curvature metric at the mode, as the face tier's (here in its low-rank form, below), and trajectories long enough
#: for 5,130 weights: the step adapts to about 0.1 there (ε shrinks as P^(−1/4)), so 8 leapfrog steps
#: moved about one posterior standard deviation a proposal and random-walked (512 features, 4 chains,
#: 100 + 400 × 8: R̂ 1.067, bulk ESS 55 of 1,600 draws, ≈ 440 s of CPU). The curvature at the mode is
#: the right metric there (the draws it whitens have variances 0.8–1.3 in every coordinate; one
#: averaged over a Gaussian around the mode was worse); the trajectory was too short: 16 steps at the
#: same number of gradients gave ESS 107 and R̂ 1.036, 32 steps with 8 chains (50 + 125) ESS 417 and
#: R̂ 1.021. Eight chains share each read of the 105 MB metric (6.9 ms of CPU a chain and step
#: against 10.1 with four). 24 fixed steps (a target acceptance of 0.7 lets the step grow to 0.10–0.13):
#: 8 × 250 draws, R̂ 1.014, bulk ESS 834, 575 s of CPU at load 5–10: ESS ≥ 400 met, R̂ ≤ 1.01 not
#: quite (a floor of the largest of 10,000 values; about 350 sampling iterations should reach it).
#: The trajectory's length is set, not its steps (``trajectory_length`` T, each chain ⌈T/ε_c⌉
#: steps, at most 32). T = 2.5 (jitter 0.5) left R̂ at 1.015–1.019 with bulk ESS far above 400:
#: what held it up was the folded (tail) R̂, not the bulk (64 features: bulk 1.009, at its floor,
#: folded 1.019; 246 of the probe's 10,000 probabilities over 1.01 in the folded R̂, none in the
#: bulk). In the metric's whitened units a trajectory of time τ moves x → x cos τ + r sin τ, so x²
#: (what the fold sees) keeps E[cos² τ] ≈ 0.53 of itself a proposal at T = 2.5: measured 0.55 on the
#: whitened draws, and x −0.27 (hmc.py, ``trajectory_length``). T = π/2 with jitter 0.3 gives x²
#: 0.27 and x 0.08, in 6–7 steps at 64 features instead of 10; of that 0.27, 0.19 are the rejected
#: proposals (a rejection repeats the draw), so a target acceptance of 0.8 (0.88 realised, 7–8 steps)
#: is worth its smaller step. Measured with ``benchmarks/measure_hmc_feature_head.py --breakdown``
#: (one thread, 8 chains; the R̂ of fewer draws from each chain's first ones; load 1–10, so CPU
#: seconds compare only roughly; the floor is the same draws dealt out at random):
#:
#: ===================================  ======  ========================  ======================  =============
#: features, T, jitter, target, draws   CPU s   R̂ (bulk / folded)         ESS bulk / folded / tail  floor
#: ===================================  ======  ========================  ======================  =============
#: 64, 2.5, 0.5, 0.7, 8 × 250           55      1.019 (1.009 / 1.019)     1,346 / 559 / 419       1.008
#: 64, π/2, 0.5, 0.7, 8 × 250           44      1.018 (1.014 / 1.018)     810 / 735 / 643         1.008–1.010
#: 64, π/2, 0.3, 0.7, 8 × 250           39      1.017 (1.011 / 1.017)     940 / 740 / 611         1.009–1.010
#: 64, π/2, 0.3, 0.8, 8 × 250           –       1.012                     938 / – / 790           1.009–1.011
#: 64, π/2, 0.3, 0.8, 8 × 400           –       1.008                     1,786 / – / 1,518       1.005–1.007
#: 64, π/2, 0.3, 0.8, 8 × 500           70      1.006 (1.006 / 1.006)     2,153 / 2,331 / 1,806   1.005–1.006
#: ===================================  ======  ========================  ======================  =============
#:
#: 512 features, π/2, 0.3, 0.7 (one run of 8 × 500, R̂ of each chain's first draws; load 4.5–7.7):
#: 8 × 250 1.018, 8 × 400 1.012, 8 × 500 1.009 (bulk 1.009 / folded 1.007; ESS 1,614 / 1,937 / 1,440;
#: floors 1.008–1.010, 1.005–1.006, 1.004), 12–14 steps, 933 s of CPU for 75 + 500. There the folded
#: R̂ no longer leads, and the first and second halves agree (1.018 / 1.016 over 8 × 250 each), so
#: 75 warm-up iterations are enough. These settings (8 × 500 at T = π/2, jitter 0.3, target 0.8):
#: R̂ 1.006 at 64 features, and at 512 R̂ 1.0064 (folded 1.0059), bulk / tail ESS 1,961 / 1,791,
#: 15–18 steps, 986 s of CPU at load 3–4 (its first 400 draws a chain: 1.009). At most 24
#: steps: π/2 in full down to ε 0.065 (about 2,000 features, ε shrinking as P^(−1/4)), and the
#: planned gradients' bound (575 × 24) keeps the tier's samplers under the paper tier's epochs.
#:
#: The metric is the same curvature kept as its median level plus the directions off it
#: (``metric=curvature-lowrank``, :mod:`~core.engine.inference.lowrank_metric`): at 512 features
#: 90 of 5,130 directions lie outside a factor 1.25 of the level (none between 1.2 and 1.5 times
#: it), so M⁻¹r is two thin products instead of a 105 MB one and a transition costs 0.48 of the
#: dense metric's CPU (same steps, alternating in one process; docs/performance.md, "Building a
#: feature tier", 2026-11-29 12:20). The same settings, seed 0: R̂ 1.0066 (bulk 1.0064 / tail
#: 1.0066), bulk / tail ESS 1,687 / 1,274, acceptance 0.89, 15–19 steps, **388 s of CPU** for
#: the mode, its curvature, the eigendecomposition and 75 + 500 iterations at load 6–18 (the dense
#: metric: 917–986 s); its first 400 draws a chain 1.0077 (floor 1.005). Seed 1: R̂ 1.0071, ESS
#: 2,046 / 1,802, 355 s, first 400 draws 1.0089: 8 × 400 would leave 0.001–0.002 of margin, and
#: HMC is no longer the build's longest lane, so 8 × 500 stays.
FEATURES_HMC = ("--set", "num_chains=8", "--set", "metric=curvature-lowrank", "--set", "init=overdispersed",
                "--set", "step_size=0.1", "--set", "target_accept=0.8", "--set", "num_warmup=75",
                "--set", "num_samples=500", "--set", "thin=1", "--set", "trajectory_length=1.5708",
                "--set", "step_size_jitter=0.3",
                "--set", "num_leapfrog=24", "--keep-draws", "50")
