"""``vllm-kimi-eagle gpu-check``: does the plugin work on this GPU, with this vLLM?

On a machine with a CUDA GPU and the CUDA build of vLLM, it serves the tiny Kimi models
(built or reused; their MLA head dims are Kimi's, which vLLM's GPU MLA backends require)
through a matrix of real engines, each in its own process, compiled and with CUDA
graphs (``matrix``): the runner vLLM picks and each runner forced, no draft, the plugin
and vLLM's in-tree class, the base and EAGLE3.1 drafts, probabilistic draft sampling,
the user's explicit ``use_local_argmax_reduction: false``, and tensor parallel 2 when
two GPUs are visible. It asserts (``verdicts``) that every engine starts, that drafts
are proposed, that the plugin's tokens and acceptance equal the in-tree class's (the
same math on the same inputs), and that the plugin logs the shortcut decision each
setting calls for; tokens against no draft are counted and reported (bfloat16 near-ties
can flip on a GPU). Then it measures tokens/s of no draft, the plugin and the in-tree
class on live servers in interleaved rounds (``bench-e2e``'s measurement). Prints a
table, writes ``gpu-check.json``, exits 1 when an assertion fails and 2 when there is no
CUDA GPU or no CUDA vLLM.
"""
