"""Depth-wise layer fusion: DWAtt and Concat, and P-32.

M. ElNokrashy, B. AlKhamissi and M. Diab, "Depth-Wise Attention (DWAtt): A Layer Fusion Method for Data-Efficient
Classification", LREC-COLING 2024 (arXiv:2209.15168).
Anonymous, "Adding 32 Parameters to a LLM can Improve Fine-tuned Classification Performance by up to 1.5-6 Percentage
Points", ICLR 2024 submission (withdrawn; OpenReview NxxbLJaDJQ).

Both read the block outputs z_1..z_L of a backbone and hand the task head a fusion of them in place of z_L: DWAtt
(attention over depth), Concat (a sum of affine maps), P-32 (softmax-weighted scalars, one per block), the plain mean,
the last block alone, or n extra blocks (Base+n). `method=layer_fusion` trains one of them under the DWAtt few-shot
protocol or the P-32 classification protocol (layer_fusion/run.py, the module in layer_fusion/fusion.py);
`method=layer_fusion_params` counts their parameters from configs (layer_fusion/params.py).
"""
