"""Visual QA report (`rowbeam report BUNDLE --out DIR`): static HTML pages with overlays, residual
distributions, dataset statistics and baseline drift, plus report.json (rowbeam/report@1).

numpy only (PNG written with zlib); never imports bpy. Modules: png (encoding, thumbnails), colour
(colour maps, flow wheel, ids, drawing), overlays (one image per overlay), stats (residual
distributions, dataset statistics, drift), html (pages), build (the command).
"""
