"""Depth-wise layer fusion: DWAtt and Concat, and P-32 ("Adding 32 parameters to a LLM ...")

DWAtt: depth-wise attention over layer outputs; P-32: learned softmax pooling, one scalar per block (anonymous ICLR-style submission).
Spec: ../shared/papers/layer_fusion_dwatt.md and layer_fusion_p32.md. Not implemented yet (a later issue): this package has no method and is not registered.
"""
