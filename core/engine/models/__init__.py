"""Classifier architectures: the D-SGHMC paper's softmax regression, an MLP, a LeNet and a
small residual network for colour photos.

Every model maps a batch ``(N, C, S, S)`` of images in [0, 1] (``C = 1``, ``S = 28`` for
digits; ``C = 3`` for colour photos) to ``(N, K)`` logits. A model trained on a person's own
images first standardises its input with the per-channel mean and standard deviation of the
training images (``ArchSpec.mean``/``std``), so the posterior file holds everything a
prediction needs and every input stays in [0, 1] outside the model. With
``ArchSpec.input_dim`` set, the softmax regression and the MLP read ``(N, D)`` feature vectors
instead (face descriptors: the D-SGHMC paper's softmax layer on a pretrained descriptor).
Dropout layers are :class:`Dropout` modules (``torch.nn.Dropout`` that can draw its masks
from an explicit ``torch.Generator``); :mod:`core.engine.models.dropout` switches them on at
prediction time (:func:`~core.engine.models.dropout.mc_dropout`, Gal & Ghahramani 2016) and makes
training masks reproducible from a seed without touching torch's global random state.
:mod:`core.engine.models.stacked` runs S weight sets of a model in one pass.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal

import torch
from torch import nn

from core.engine.memory import check_fits
from core.engine.model_inputs import IMAGE_SIZE

ArchName = Literal["softmax", "mlp", "lenet", "lenet5", "resnet", "resnet18", "features"]
#: The architectures every method trains from a random start.
ARCHITECTURES: tuple[str, ...] = ("softmax", "mlp", "lenet", "lenet5", "resnet")
#: LeNet-5's widths (LeCun et al. 1998): two convolutions, then two hidden layers.
LENET5_WIDTHS: tuple[int, int, int, int] = (6, 16, 120, 84)
#: Architectures a network trained elsewhere brings (``bayescope-cli import``): predicted with,
#: and the start of the post-hoc methods (Laplace, SWAG), never trained from a random start here.
IMPORTED_ARCHITECTURES: tuple[str, ...] = ("resnet18",)
#: A softmax-regression head on the features of a person's own network (TorchScript or
#: torch.export, :mod:`core.engine.networks`): trained on the cached features, predicting on images.
FEATURES = "features"
#: torchvision's ResNet-18 stages: (width, stride of the first block), two basic blocks each.
RESNET18_STAGES: tuple[tuple[int, int], ...] = ((64, 1), (128, 2), (256, 2), (512, 2))
#: ResNet-18 halves its input five times; 32 pixels leave one at the last stage.
RESNET18_MIN_SIZE = 32
#: The network a colour data set gets when no architecture is named.
COLOUR_ARCHITECTURE = "resnet"
#: The side a colour data set is resized to when no size is named (CIFAR's).
COLOUR_IMAGE_SIZE = 32
#: Channels an image may have: grey (1) or colour (3, RGB).
CHANNELS: tuple[int, ...] = (1, 3)
#: The residual network's widths per stage (one basic block each: a ResNet-8).
RESNET_WIDTHS: tuple[int, ...] = (16, 32, 64)
#: The residual network's smallest input side (two stride-2 stages need at least 4 pixels).
RESNET_MIN_SIZE = 8

#: Bounds on the sizes an architecture record may ask for. They are far above anything
#: trained here and exist so that a damaged or hostile file (10⁸ classes) is refused with a
#: sentence before any tensor is allocated; :func:`check_model_fits` then asks for memory.
MAX_CLASSES = 100_000
MAX_HIDDEN = 1_000_000
MAX_IMAGE_SIZE = 4096
#: Longest feature vector a model may read (as many values as the largest image).
MAX_INPUT_DIM = MAX_IMAGE_SIZE**2
#: Architectures that can read a feature vector instead of an image.
VECTOR_ARCHITECTURES: tuple[str, ...] = ("softmax", "mlp")
#: LeNet's two 5×5 convolutions and 2×2 poolings need at least this input side.
LENET_MIN_SIZE = 16


@dataclass(frozen=True)
class ArchSpec:
    """Everything needed to rebuild a model; saved with every posterior.

    Attributes
    ----------
    name
        ``"softmax"`` (multinomial logistic regression, the D-SGHMC paper's model),
        ``"mlp"`` (784-H-H-K with ReLU), ``"lenet"`` (LeNet-5-style CNN, 20-50-500),
        ``"lenet5"`` (LeNet-5's own widths, 6-16-120-84: 44,426 weights at 28×28, small
        enough for 100 stored draws per sampler),
        ``"resnet"`` (a ResNet-8 for colour photos of 32–64 pixels: widths 16-32-64) or
        ``"resnet18"`` (torchvision's ResNet-18 with its batch norm folded into the
        convolutions: imported, :mod:`core.engine.import_weights`).
    num_classes
        Number of output classes K.
    drop_rate
        Probability that a unit is *dropped* by each dropout layer (0 disables them).
    hidden
        Width of the MLP's hidden layers (ignored by the other architectures).
    image_size
        Side of the square input image.
    channels
        1 for grey images, 3 for colour (RGB). Left out of :meth:`to_dict` when 1, so grey
        posteriors are written exactly as before the field existed (and old files load).
    mean, std
        Per-channel mean and standard deviation of the training images, with which the
        model standardises its input (``(x − mean) / std``); empty (the default, and every
        file before them) means the input is used as it is. Left out of :meth:`to_dict`
        when empty.
    input_dim
        Length D of a feature-vector input, e.g. a face descriptor (the models then read
        ``(N, D)``); 0, the default, means an image of ``image_size²`` pixels. Only
        ``"softmax"`` and ``"mlp"`` read vectors. Left out of :meth:`to_dict` when 0, so
        image posteriors are written exactly as before the field existed.
    features, network, head
        ``"features"`` only: the length D of the features a person's own network hands its
        last linear layer, that network's SHA-256 and that layer's name. The model is a
        softmax regression on those D numbers; it reads the features themselves ``(N, D)``
        (training, cached) or images ``(N, C, S, S)``, which a posterior first turns into
        features with the network (:func:`core.engine.networks.split_network_for`), standardised
        by ``mean``/``std``. Left out of :meth:`to_dict` when unset.
    """

    name: ArchName = "lenet"
    num_classes: int = 10
    drop_rate: float = 0.0
    hidden: int = 100
    image_size: int = IMAGE_SIZE  # a digit's
    input_dim: int = 0
    channels: int = 1
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()
    features: int = 0
    network: str = ""
    head: str = ""

    def to_dict(self) -> dict:
        out = asdict(self)
        if not self.input_dim:
            del out["input_dim"]
        for key in ("features", "network", "head"):
            if not out[key]:
                del out[key]
        if self.channels == 1:
            del out["channels"]
        for key in ("mean", "std"):
            if getattr(self, key):
                out[key] = list(getattr(self, key))
            else:
                del out[key]
        return out

    @property
    def input_size(self) -> int:
        """Number of input values per example: D for vectors, channels·image_size² for images."""
        return self.input_dim or self.channels * self.image_size**2

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input: ``(D,)`` or ``(channels, image_size, image_size)``."""
        return (self.input_dim,) if self.input_dim else (self.channels, self.image_size, self.image_size)

    @classmethod
    def from_dict(cls, data: dict) -> ArchSpec:
        if not isinstance(data, dict):
            raise ValueError("the architecture record is not a table of fields")
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown architecture fields: {sorted(map(str, unknown))}")
        data = dict(data)
        for key in ("mean", "std"):  # written as lists
            if key in data:
                if not isinstance(data[key], (list, tuple)):
                    raise ValueError(f"architecture field {key} has an invalid value {data[key]!r}")
                data[key] = tuple(data[key])
        return cls(**data)

    def __post_init__(self) -> None:
        # Types first: a file may hold anything, and e.g. a float width or a string class
        # count must not reach nn.Linear (or pass a comparison by accident).
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("name", "network", "head"):
                ok = isinstance(value, str)
            elif f.name in ("mean", "std"):
                ok = isinstance(value, tuple) and all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)
            elif f.name == "drop_rate":
                ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            else:
                ok = isinstance(value, int) and not isinstance(value, bool)
            if not ok:
                raise ValueError(f"architecture field {f.name} has an invalid value {value!r}")
        if self.name not in (*ARCHITECTURES, *IMPORTED_ARCHITECTURES, FEATURES):
            raise ValueError(f"unknown architecture {self.name!r}; choose from {ARCHITECTURES}")
        if not 0.0 <= self.drop_rate < 1.0:
            raise ValueError(f"drop_rate must lie in [0, 1), got {self.drop_rate}")
        if self.name == "resnet18" and self.drop_rate:
            raise ValueError("ResNet-18 has no dropout layers, so its drop rate must be 0")
        if not 2 <= self.num_classes <= MAX_CLASSES:
            raise ValueError(
                f"a classifier needs between 2 and {MAX_CLASSES} classes, got {self.num_classes}"
            )
        if not 1 <= self.hidden <= MAX_HIDDEN:
            raise ValueError(f"the hidden width must lie between 1 and {MAX_HIDDEN}, got {self.hidden}")
        if self.input_dim:
            if self.name not in VECTOR_ARCHITECTURES:
                raise ValueError(f"the {self.name} architecture reads images, not feature vectors")
            if not 1 <= self.input_dim <= MAX_INPUT_DIM:
                raise ValueError(
                    f"the input length must lie between 1 and {MAX_INPUT_DIM} features, got {self.input_dim}"
                )
        if self.channels not in CHANNELS:
            raise ValueError(f"images have 1 (grey) or 3 (colour) channels, got {self.channels}")
        if len(self.mean) != len(self.std) or (self.mean and len(self.mean) != self.channels):
            raise ValueError(f"the input standardisation needs one mean and one standard deviation "
                             f"per channel ({self.channels}), got {len(self.mean)} and {len(self.std)}")
        if self.mean and (self.input_dim or min(self.std) <= 0):
            raise ValueError("the input standardisation needs images and positive standard deviations")
        if (self.name == FEATURES) != bool(self.features and self.network and self.head):
            raise ValueError("a head on a network's features needs the features' length, the network's checksum "
                             "and its last layer's name, and only such a head has them")
        if self.name == FEATURES and not 1 <= self.features <= MAX_INPUT_DIM:
            raise ValueError(f"the features' length must lie between 1 and {MAX_INPUT_DIM}, got {self.features}")
        low = {"lenet": LENET_MIN_SIZE, "lenet5": LENET_MIN_SIZE, "resnet": RESNET_MIN_SIZE,
               "resnet18": RESNET18_MIN_SIZE}.get(self.name, 1)
        if not low <= self.image_size <= MAX_IMAGE_SIZE:
            raise ValueError(
                f"the {self.name} architecture needs an image size between {low} and "
                f"{MAX_IMAGE_SIZE} pixels, got {self.image_size}"
            )

    def parameter_count(self) -> int:
        """Number of weights of the model, computed without building it."""
        d, k, h = self.input_size, self.num_classes, self.hidden
        if self.name == FEATURES:
            return self.features * k + k
        if self.name == "softmax":
            return d * k + k
        if self.name == "mlp":
            return d * h + h + h * h + h + h * k + k
        c = self.channels
        if self.name == "resnet":
            return _resnet_parameter_count(c, k)
        if self.name == "resnet18":
            return _resnet18_parameter_count(c, k)
        side = _lenet_side(self.image_size)
        if self.name == "lenet5":
            a, b, h1, h2 = LENET5_WIDTHS
            return (25 * c * a + a) + (a * 25 * b + b) + (b * side * side * h1 + h1) + (h1 * h2 + h2) + (h2 * k + k)
        return (25 * c * 20 + 20) + (20 * 25 * 50 + 50) + (50 * side * side * 500 + 500) + (500 * k + k)

    def activations_per_image(self) -> int:
        """Floats one image's forward pass holds (every layer's output), for memory estimates."""
        d, k, h = self.input_size, self.num_classes, self.hidden
        if self.name == FEATURES:  # the head's own: the network's features are computed before it
            return 2 * self.features + k
        if self.name == "softmax":
            return 2 * d + k
        if self.name == "mlp":
            return 2 * d + 6 * h + k
        if self.name == "resnet18":  # each block's two convolutions, biases, ReLUs and the sum
            side = (self.image_size + 1) // 2
            total = 2 * d + 3 * 64 * side * side
            side = (side + 1) // 2
            for width, stride in RESNET18_STAGES:
                side = side if stride == 1 else (side + 1) // 2
                total += 2 * 7 * width * side * side
            return total + 512 + k
        if self.name == "resnet":  # every convolution's output, its ReLU and the sum, per stage
            side, total = self.image_size, 2 * d
            for i, width in enumerate(RESNET_WIDTHS):
                side = side if i == 0 else (side + 1) // 2
                total += 6 * width * side * side
            return total + RESNET_WIDTHS[-1] + k
        s1 = self.image_size - 4
        s2 = s1 // 2 - 4
        if self.name == "lenet5":
            a, b, h1, h2 = LENET5_WIDTHS
            return d + 3 * a * s1 * s1 + 3 * b * s2 * s2 + 3 * (h1 + h2) + k
        return d + 3 * 20 * s1 * s1 + 3 * 50 * s2 * s2 + 3 * 500 + k


def _lenet_side(image_size: int) -> int:
    return ((image_size - 4) // 2 - 4) // 2


def _resnet_parameter_count(channels: int, num_classes: int) -> int:
    total, width = 9 * channels * RESNET_WIDTHS[0] + RESNET_WIDTHS[0], RESNET_WIDTHS[0]  # the stem
    for out in RESNET_WIDTHS:
        total += 9 * width * out + out + 9 * out * out + out
        if out != width:
            total += width * out + out  # the 1×1 shortcut
        width = out
    return total + width * num_classes + num_classes


def _resnet18_parameter_count(channels: int, num_classes: int) -> int:
    """ResNet-18's weights with each batch norm folded into a per-channel bias."""
    total, width = 49 * channels * 64 + 64, 64  # the 7×7 stem and its bias
    for out, stride in RESNET18_STAGES:
        for block in range(2):
            total += 9 * width * out + out + 9 * out * out + out
            if block == 0 and (stride != 1 or width != out):
                total += width * out + out  # the 1×1 shortcut and its bias
            width = out
    return total + width * num_classes + num_classes


def check_model_fits(spec: ArchSpec, copies: int = 1, what: str | None = None, device: object = None) -> None:
    """Refuse (with the estimate) an architecture whose ``copies`` weight sets cannot fit
    (on ``device``'s free memory for a GPU).

    Training holds the weights, their gradients and the optimiser's two moments, so callers
    pass ``copies`` of at least 4 for a fit.
    """
    nbytes = 4.0 * spec.parameter_count() * copies
    check_fits(
        nbytes,
        what or f"a {spec.name} model with {spec.parameter_count():,} weights",
        "choose a smaller architecture (fewer classes or a narrower hidden layer)",
        device,
    )


class Dropout(nn.Dropout):
    """``nn.Dropout`` that draws its masks from :attr:`generator` when one is set.

    ``nn.Dropout`` always uses torch's global generator, which makes training masks depend on
    whatever else ran before (another thread, another model) and prediction masks impossible
    to pin to a posterior. With ``generator`` set, masks are z ~ Bernoulli(1 − p) from it and
    the output is x ⊙ z / (1 − p), exactly ``nn.Dropout``'s rule.
    """

    generator: torch.Generator | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0 or self.generator is None:
            return super().forward(x)
        keep = 1.0 - self.p
        mask = torch.empty_like(x).bernoulli_(keep, generator=self.generator)
        return x * mask / keep


class Standardise(nn.Module):
    """``(x − mean) / std`` per channel with the training images' statistics; no weights.

    The statistics are buffers, not parameters: they belong to the data, not to the
    posterior over weights, so no method samples or perturbs them. Without statistics
    (every digit model) the input passes unchanged.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.active = bool(spec.mean)
        shape = (1, max(len(spec.mean), 1), 1, 1)
        self.register_buffer("mean", torch.tensor(spec.mean or (0.0,), dtype=torch.float32).reshape(shape),
                             persistent=False)
        self.register_buffer("std", torch.tensor(spec.std or (1.0,), dtype=torch.float32).reshape(shape),
                             persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.active:
            return x
        if x.ndim != 4 or x.shape[1] != self.mean.shape[1]:  # broadcasting would hide a grey input
            raise ValueError(f"the model reads images of {self.mean.shape[1]} channel(s), got an input "
                             f"of shape {tuple(x.shape)}")
        return (x - self.mean) / self.std


class SoftmaxRegression(nn.Module):
    """p(y | x, W, b) = softmax(W x + b), the model of the D-SGHMC paper's MNIST experiment."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.standardise = Standardise(spec)
        self.dropout = Dropout(spec.drop_rate)
        self.linear = nn.Linear(spec.input_size, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(self.standardise(x).flatten(1)))


class FeatureHead(SoftmaxRegression):
    """Softmax regression on the D features a person's own network hands its last linear layer
    (``ArchSpec.name == "features"``): the same weights ``linear.weight`` (K, D) and
    ``linear.bias``, the same dropout on its inputs (D-SGHMC), no standardisation of its own (the
    network's ``mean``/``std`` standardise the images before the network). It reads (N, D)
    features; a posterior turns images into them first (:func:`image_features`)."""

    def __init__(self, spec: ArchSpec) -> None:
        nn.Module.__init__(self)
        self.spec = spec
        self.standardise = nn.Identity()
        self.dropout = Dropout(spec.drop_rate)
        self.linear = nn.Linear(spec.features, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.dropout(image_features(self.spec, x)))


def image_features(spec: ArchSpec, x: torch.Tensor) -> torch.Tensor:
    """``x`` as a ``"features"`` head reads it: images (N, C, S, S) through the network the head
    sits on (its kept copy, :mod:`core.engine.networks`), features (N, D) as they are."""
    if spec.name != FEATURES or x.ndim == 2:
        return x
    from core.engine.networks import NetworkInput, split_network_for

    wanted = NetworkInput(spec.image_size, spec.channels, spec.mean, spec.std)
    return split_network_for(spec.network, spec.head, wanted).features(x).to(x.device)


class MLP(nn.Module):
    """784-H-H-K (or D-H-H-K) ReLU network with dropout before each hidden and the output layer."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        h = spec.hidden
        self.standardise = Standardise(spec)
        self.net = nn.Sequential(
            nn.Flatten(),
            nn.Linear(spec.input_size, h),
            nn.ReLU(),
            Dropout(spec.drop_rate),
            nn.Linear(h, h),
            nn.ReLU(),
            Dropout(spec.drop_rate),
            nn.Linear(h, spec.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.standardise(x))


class LeNet(nn.Module):
    """LeNet-5-style CNN (conv 20, conv 50, fc 500) with dropout after every hidden layer.

    This is the "LeNet-all" placement of Gal & Ghahramani's MNIST experiments: dropout after
    each convolution block and after the fully connected layer.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        side = _lenet_side(spec.image_size)
        self.standardise = Standardise(spec)
        self.features = nn.Sequential(
            nn.Conv2d(spec.channels, 20, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            Dropout(spec.drop_rate),
            nn.Conv2d(20, 50, 5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            Dropout(spec.drop_rate),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(50 * side * side, 500),
            nn.ReLU(),
            Dropout(spec.drop_rate),
            nn.Linear(500, spec.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(self.standardise(x)))


class LeNet5(nn.Module):
    """LeNet-5's widths (conv 6, conv 16, fc 120, fc 84; LeCun et al. 1998, with ReLU and max
    pooling), dropout after every hidden layer as :class:`LeNet` has it. 44,426 weights at 28×28:
    a network that reads drawn digits (≥ 98.5 % on MNIST's test set) and whose 100 float16 draws
    are 8.9 MB, where LeNet's 20-50-500 are 86 MB."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        side = _lenet_side(spec.image_size)
        a, b, h1, h2 = LENET5_WIDTHS
        self.standardise = Standardise(spec)
        self.features = nn.Sequential(
            nn.Conv2d(spec.channels, a, 5), nn.ReLU(), nn.MaxPool2d(2), Dropout(spec.drop_rate),
            nn.Conv2d(a, b, 5), nn.ReLU(), nn.MaxPool2d(2), Dropout(spec.drop_rate),
        )
        self.classifier = nn.Sequential(
            nn.Flatten(),
            nn.Linear(b * side * side, h1), nn.ReLU(), Dropout(spec.drop_rate),
            nn.Linear(h1, h2), nn.ReLU(), Dropout(spec.drop_rate),
            nn.Linear(h2, spec.num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(self.standardise(x)))


class BasicBlock(nn.Module):
    """He et al. (2016)'s basic residual block, relu(x' + F(x)), without batch normalisation.

    Batch norm keeps running statistics outside the weights, which a posterior over the
    weights (stacked samples under vmap, a Laplace or SWAG Gaussian) would not carry; the
    residual branch's last convolution starts at zero instead (as Fixup does), so every
    block starts as the identity and a deep stack trains without normalisation.
    """

    def __init__(self, width_in: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width_in, width, 3, stride=stride, padding=1)
        self.conv2 = nn.Conv2d(width, width, 3, padding=1)
        nn.init.zeros_(self.conv2.weight)
        self.shortcut = (nn.Identity() if width_in == width and stride == 1
                         else nn.Conv2d(width_in, width, 1, stride=stride))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.shortcut(x) + self.conv2(torch.relu(self.conv1(x))))


class ResNet(nn.Module):
    """A ResNet-8 for colour photos of 32–64 pixels: a 3×3 stem, three basic blocks of
    widths 16, 32, 64 (the last two halve the side), global average pooling, a linear layer.

    Dropout follows every stage and precedes the output layer, so MC dropout has layers to
    sample, and the output layer is the last ``nn.Linear`` (last-layer Laplace). Global
    pooling makes it read any image side from :data:`RESNET_MIN_SIZE` up.
    """

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.standardise = Standardise(spec)
        layers: list[nn.Module] = [nn.Conv2d(spec.channels, RESNET_WIDTHS[0], 3, padding=1), nn.ReLU()]
        width = RESNET_WIDTHS[0]
        for i, out in enumerate(RESNET_WIDTHS):
            layers += [BasicBlock(width, out, 1 if i == 0 else 2), Dropout(spec.drop_rate)]
            width = out
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), Dropout(spec.drop_rate), nn.Linear(width, spec.num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(self.standardise(x)))


class ChannelBias(nn.Module):
    """What a batch norm is in inference mode once its scale is folded into the convolution
    before it: a bias per channel. (Named ``bias``, as the batch norm's own shift was.)"""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias.view(1, -1, 1, 1)


class Block18(nn.Module):
    """torchvision's ``BasicBlock`` with folded batch norms (the same names, so that a ResNet-18
    ``state_dict`` maps onto it): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))."""

    def __init__(self, width_in: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(width_in, width, 3, stride, 1, bias=False)
        self.bn1 = ChannelBias(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = ChannelBias(width)
        self.downsample = (nn.Sequential(nn.Conv2d(width_in, width, 1, stride, bias=False), ChannelBias(width))
                           if stride != 1 or width_in != width else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))
        return (out + (x if self.downsample is None else self.downsample(x))).relu()


class ResNet18(nn.Module):
    """He et al.'s ResNet-18 as torchvision builds it (a 7×7 stride-2 stem, 3×3 max pooling, four
    stages of two basic blocks, widths 64–512, global average pooling), every batch norm folded
    into the convolution before it: in inference mode the same function, with no statistics
    outside its weights. Only imported (:func:`core.engine.import_weights.import_network`)."""

    def __init__(self, spec: ArchSpec) -> None:
        super().__init__()
        self.standardise = Standardise(spec)
        self.conv1 = nn.Conv2d(spec.channels, 64, 7, 2, 3, bias=False)
        self.bn1 = ChannelBias(64)
        width = 64
        for i, (out, stride) in enumerate(RESNET18_STAGES, start=1):
            self.add_module(f"layer{i}", nn.Sequential(Block18(width, out, stride), Block18(out, out, 1)))
            width = out
        self.fc = nn.Linear(width, spec.num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn1(self.conv1(self.standardise(x))).relu()
        h = nn.functional.max_pool2d(h, 3, 2, 1)
        h = self.layer4(self.layer3(self.layer2(self.layer1(h))))
        return self.fc(h.mean((2, 3)))


_CLASSES: dict[str, type[nn.Module]] = {"softmax": SoftmaxRegression, "mlp": MLP, "lenet": LeNet, "lenet5": LeNet5,
                                        "resnet": ResNet, "resnet18": ResNet18, FEATURES: FeatureHead}


def build_model(spec: ArchSpec) -> nn.Module:
    """Build a freshly initialised model in eval mode (dropout off).

    Its weights are checked against the available memory first (:func:`check_model_fits`).
    """
    check_model_fits(spec)
    return _CLASSES[spec.name](spec).eval()


def num_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
