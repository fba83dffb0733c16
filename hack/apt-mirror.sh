# Sourced by hack/setup.sh and hack/vm/image.sh: the Debian mirror this machine's apt sources use.
#
# debian_mirror SUITE [FILE...]
#   Prints the first URI of an enabled `deb` entry for SUITE (e.g. bookworm, bookworm-security),
#   reading FILEs in the order given, or else apt's own: /etc/apt/sources.list, then
#   /etc/apt/sources.list.d/*.list and *.sources in name order. Reads deb822 stanzas (*.sources:
#   Types/URIs/Suites/Enabled) and one-line entries (`deb [options] URI SUITE COMPONENT...`).
#   Fails, naming the files read, when none has SUITE: the project names no mirror host itself.
debian_mirror() {
  local suite=$1
  shift
  local files=("$@") f uri=""
  if [ "${#files[@]}" -eq 0 ]; then
    files=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*; do
      case "$f" in *.list | *.sources) files+=("$f") ;; esac
    done
  fi
  for f in "${files[@]}"; do
    [ -r "$f" ] || continue
    case "$f" in
      *.sources) uri=$(_debian_mirror_deb822 "$suite" <"$f") ;;
      *) uri=$(_debian_mirror_one_line "$suite" <"$f") ;;
    esac
    [ -n "$uri" ] && break
  done
  if [ -z "$uri" ]; then
    echo "no apt source has a 'deb' entry for the Debian suite $suite (read: ${files[*]});" \
      "add one to apt's sources" >&2
    return 1
  fi
  echo "$uri"
}

# deb822: stanzas split by blank lines, `Name: value` fields (names in any case), values folded
# over indented lines, `#` comment lines.
_debian_mirror_deb822() {
  awk -v suite="$1" '
    function has(list, word,   n, i, w) {
      n = split(list, w)
      for (i = 1; i <= n; i++) if (w[i] == word) return 1
      return 0
    }
    function stanza(   u) {
      if (!done && tolower(enabled) != "no" && has(types, "deb") && has(suites, suite) &&
          split(uris, u) > 0) {
        print u[1]
        done = 1
      }
      types = suites = uris = enabled = field = ""
    }
    /^#/ { next }
    /^[ \t]*$/ { stanza(); next }
    /^[ \t]/ { value[field] = value[field] " " $0; set(); next }
    {
      field = tolower(substr($0, 1, index($0, ":") - 1))
      value[field] = substr($0, index($0, ":") + 1)
      set()
    }
    function set() {
      if (field == "types") types = value[field]
      else if (field == "suites") suites = value[field]
      else if (field == "uris") uris = value[field]
      else if (field == "enabled") { enabled = value[field]; gsub(/[ \t]/, "", enabled) }
    }
    END { stanza() }
  '
}

# One-line entries: `deb [options] URI SUITE COMPONENT...`, `#` to the end of a line a comment.
_debian_mirror_one_line() {
  awk -v suite="$1" '
    { sub(/#.*/, "") }
    $1 == "deb" {
      i = 2
      if ($i ~ /^\[/) {
        while (i <= NF && $i !~ /\]$/) i++
        i++
      }
      if (i + 1 <= NF && $(i + 1) == suite) { print $i; exit }
    }
  '
}
