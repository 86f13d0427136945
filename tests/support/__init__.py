"""What the tests share, one module per kind of thing (fixtures stay in tests/conftest.py):

- corpus: tiny real images, metadata files, Corpus (an IMAGES_DIR with its metadata), the shipped
  example, and an OUT_DIR's published bytes (tree_bytes).
- packing: config_for (the PackConfig for a Corpus), pack_example (the `pack-shards` command on
  the example), s3_env.
- cli: run_cli, a command run in the test's process (for the tests that run one many times).
- readback: read a dataset back with a real `datasets` (this venv's, or 3.6's) in a subprocess.
- compat_corpus, export_corpus: corpora built to break loaders, and the rows they should read as.
- dask_cluster: a real Dask scheduler and workers in subprocesses.
- readme_blocks: the fenced blocks of README.md and docs/, for the tests that run them.

The test servers stay beside the tests, as README and scripts/demo.sh run them by name
(tests/hub_server.py, tests/http_server.py, tests/fault_proxy.py), and so do the files other
processes run or import by path or module name: compat_reader.py, splits_reader.py,
any_modality_reader.py, stream_resume.py, remux_functions.py, dask_worker_preload.py, and the
folders block_until_interrupted/, fill_disk_at/, hang_on_read/, hold_pool_start/.
"""
