"""A small UNet (kompute_dml/bench/families.py's "unet"): an encoder of 3x3 convolutions with
BatchNorm and ReLU and 2x2 max pools, a bottleneck, and a decoder that doubles the resolution three
ways (nearest Upsample, bilinear Upsample, a stride-2 ConvTranspose: ONNX Resize nearest, Resize
linear and ConvTranspose) and concatenates the encoder's features at each level (ONNX Concat), then a
1x1 convolution to the classes. Random weights; torch imported only when a model is built."""

from __future__ import annotations

from typing import Any


def make_unet(width: int, classes: int = 2) -> Any:
    """The UNet's torch module: `width` channels at the first level, doubled per level (three
    levels, so inputs of height and width divisible by 8)."""
    import torch
    from torch import nn

    def block(cin: int, cout: int) -> Any:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = width
            self.enc = nn.ModuleList([block(3, c), block(c, 2 * c), block(2 * c, 4 * c)])
            self.pool = nn.MaxPool2d(2)
            self.mid = block(4 * c, 8 * c)
            self.up = nn.ModuleList([nn.Upsample(scale_factor=2, mode="nearest"),
                                     nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                     nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)])
            self.dec = nn.ModuleList([block(12 * c, 4 * c), block(6 * c, 2 * c), block(3 * c, c)])
            self.head = nn.Conv2d(c, classes, 1)

        def forward(self, x: Any) -> Any:
            skips = []
            for enc in self.enc:
                x = enc(x)
                skips.append(x)
                x = self.pool(x)
            x = self.mid(x)
            for up, dec, skip in zip(self.up, self.dec, reversed(skips)):
                x = dec(torch.cat([up(x), skip], dim=1))
            return self.head(x)

    return UNet().eval()
