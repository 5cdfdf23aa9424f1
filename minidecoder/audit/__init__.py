"""The audit view: one text through one method, block by block (`minidecoder explain`).

- `explain`: what the method did (the positions it acts on, each block's intervention, the blocks run, the
  cosine with a baseline that differs only by the intervention), computed from the method's own steps
  (`methods/audit.py` says what each step reports).
- `text`: that record as the terminal's text; `plot`: as a figure.
"""
