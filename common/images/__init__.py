"""Chapter 7, your own data: images on disk, the layouts each trainer's ``--data`` reads.

A package of the core (ARCHITECTURE.md): it imports only the core and its own modules, and the
chapter packages import it, since every trainer reads a folder through ``layouts`` and ``listing``
(and ``common.data`` decodes through ``pixels``).

- ``layouts``: the trainers' ``--data`` (the shapes folder, an ImageFolder root or the guide's CSV
  layout; classes from the data) and the CSV flags, refused naming the file.
- ``digits``: arrays written out as a learner's own data, an ImageFolder of PNGs from a seeded,
  stratified split (chapter 7's digits; ``stratified_split`` is also ``splitting``'s).
- ``listing``: what a folder of class folders holds (``list_folder``), the one listing every path
  reads (the decode pipeline, the uint8 cache, the shards, the CSV layout's check, the trainers):
  system and hidden files skipped and counted, every file decided by its content, class names
  NFC-normalized, whatever cannot be used refused naming the file.
- ``pixels``: an opened image as a viewer shows it (``viewer_rgb``): EXIF orientation applied,
  16-bit and float images scaled to 8 bits, transparency composited on white.
- ``checking``: a folder's report before any training (``check_data``), shown by the entry point
  ``check`` (``python -m common.images.check DIR``, ``companion-check-images``).
- ``splitting``: a train/val split of a folder or a labels CSV (``split_folder``, ``split_csv``),
  and its entry point ``split`` (``python -m common.images.split``, ``companion-split-images``).
"""
