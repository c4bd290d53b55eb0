# Decompresses an .xz file to standard output (`unxz_cat FILE`), sourced by the scripts that unpack
# scripts/gpu-pack.sh's files: with xz where it is installed, else with Python's lzma module (a
# bare GPU machine may have one and not the other).
unxz_cat() {
  if command -v xz >/dev/null 2>&1; then
    xz -dc "$1"
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1 << 20)' "$1"
  else
    printf 'cannot decompress %s: neither xz nor python3 is installed\n' "$1" >&2
    return 1
  fi
}
