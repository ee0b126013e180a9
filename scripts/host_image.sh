#!/usr/bin/env bash
# Builds a host-matrix guest image from Debian's packages, once per recipe:
#   scripts/host_image.sh GUEST    (GUEST: a directory under hosts/, e.g. guest-a)
# prints the cache directory holding rootfs.img (raw ext4, never written by
# a run: runs boot a qcow2 overlay), vmlinuz, initrd.img and image.json
# (recipe digest, image digest, kernel package, package versions).
#
# The recipe is hosts/GUEST/ (package list, initramfs init, the payload
# unit), this script, the suite and mirror and the kernel package: its
# digest names the cache directory, so a changed recipe builds a new image
# and an unchanged one is reused. Packages come only from the Debian mirror
# apt uses on this host; the kernel is Debian's linux-image-amd64 as
# installed here (/boot and /lib/modules, owned by its package).
# Needs root, debootstrap, mkfs.ext4 (-d), busybox-static, cpio, kmod.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "host_image: needs root" >&2; exit 1; }
# debootstrap mounts the target's /proc and /sys: in a private mount
# namespace of its own, so nothing of the build shows in (or leaks into)
# the host's mount table, whatever else runs meanwhile.
if [ -z "${AUTONOMIC_HOST_IMAGE_NS:-}" ]; then
	exec env AUTONOMIC_HOST_IMAGE_NS=1 unshare --mount --propagation private -- "$PWD/scripts/host_image.sh" "$@"
fi
guest=${1:?usage: host_image.sh GUEST}
recipe=hosts/$guest
[ -f "$recipe/packages" ] || { echo "host_image: no $recipe/packages" >&2; exit 1; }
cache_root=${AUTONOMIC_HOSTS_CACHE:-/var/cache/autonomic/hosts}
suite=bookworm

# Debian's mirror as apt is configured here (deb822 or one-line sources).
mirror=$(grep -hsE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources |
	grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ' || true)
[ -n "$mirror" ] || { echo "host_image: no Debian mirror in apt's sources" >&2; exit 1; }

# The newest Debian 6.1 kernel installed here, from Debian's package.
kver=$(cd /lib/modules && ls -d 6.1.*-amd64 2>/dev/null | sort -V | tail -n 1)
[ -n "$kver" ] && [ -f "/boot/vmlinuz-$kver" ] || { echo "host_image: linux-image-amd64 (6.1) is not installed" >&2; exit 1; }
kpkg=$(dpkg-query -W -f='${Package} ${Version}' "linux-image-$kver")

pkgs=$(grep -vE '^\s*(#|$)' "$recipe/packages" | tr '\n' ',' | sed 's/,$//')
digest=$({
	sha256sum "$0" "$recipe"/* | awk '{print $1}'
	echo "$suite $mirror $kpkg"
} | sha256sum | cut -c1-16)
out=$cache_root/$guest-$digest
if [ -f "$out/image.json" ]; then
	echo "$out"
	exit 0
fi

mkdir -p "$cache_root/debs"
work=$(mktemp -d "$cache_root/.build-$guest-XXXXXX")
trap 'rm -rf --one-file-system "$work"' EXIT
tree=$work/tree
t0=$(date +%s)
# The debootstrapped tree is cached too, by its own inputs (package list,
# suite, mirror), so a change to the rest of the recipe reuses it.
base=$cache_root/base-$({ sha256sum "$recipe/packages" | cut -d' ' -f1; echo "$suite $mirror"; } | sha256sum | cut -c1-16)
if [ ! -d "$base" ]; then
	echo "host_image: debootstrap $suite from $mirror (packages: $pkgs)" >&2
	debootstrap --variant=minbase --include="$pkgs" --cache-dir="$cache_root/debs" "$suite" "$work/base" "$mirror" >"$work/debootstrap.log" 2>&1 ||
		{ tail -n 30 "$work/debootstrap.log" >&2; exit 1; }
	rm -f "$work"/base/var/cache/apt/archives/*.deb
	mv "$work/base" "$base"
fi
cp -a "$base" "$tree"

# Debian's kernel modules, as its package installed them here.
mkdir -p "$tree/lib/modules"
cp -a "/lib/modules/$kver" "$tree/lib/modules/"

# systemd as PID 1 (systemd-sysv), a root on /dev/vda, no login prompts, no
# timers or services the matrix does not use; the payload unit runs at boot.
echo "guest-${guest#guest-}" >"$tree/etc/hostname"
printf '/dev/vda / ext4 rw,errors=remount-ro 0 0\n' >"$tree/etc/fstab"
install -m 0755 "$recipe/autonomic-guest" "$tree/usr/local/sbin/autonomic-guest"
install -m 0644 "$recipe/autonomic-guest.service" "$tree/etc/systemd/system/autonomic-guest.service"
chroot "$tree" systemctl enable autonomic-guest.service >/dev/null 2>&1
for u in getty@tty1.service serial-getty@ttyS0.service postgresql.service e2scrub_all.timer e2scrub_reap.service fstrim.timer \
	apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer systemd-timesyncd.service; do
	chroot "$tree" systemctl mask "$u" >/dev/null 2>&1 || true
done
rm -f "$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/*_Packages

# Root filesystem: ext4 built from the tree (no loop mount), 8 GiB sparse.
mkfs.ext4 -q -F -L guest-root -d "$tree" "$work/rootfs.img" 8G >/dev/null

# The initramfs: static busybox, the init, and the modules it loads in order.
ird=$work/initrd
mkdir -p "$ird"/{bin,dev,proc,sys,newroot,lib/modules}
cp /bin/busybox "$ird/bin/busybox"
file "$ird/bin/busybox" | grep -q "statically linked" || { echo "host_image: /bin/busybox is not static (install busybox-static)" >&2; exit 1; }
install -m 0755 "$recipe/init" "$ird/init"
: >"$ird/modules.order"
for m in virtio_pci virtio_blk ext4 overlay; do
	modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | awk '!seen[$0]++' | while read -r ko; do
	rel=${ko#/lib/modules/}
	mkdir -p "$ird/lib/modules/$(dirname "$rel")"
	cp "$ko" "$ird/lib/modules/$rel"
	echo "$rel" >>"$ird/modules.order"
done
(cd "$ird" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) >"$work/initrd.img"
cp "/boot/vmlinuz-$kver" "$work/vmlinuz"

versions=$(chroot "$tree" dpkg-query -W -f='${Package}=${Version}\n' | sort | awk '{printf "%s\"%s\"", (NR > 1 ? "," : ""), $0}')
img=$(sha256sum "$work/rootfs.img" | cut -d' ' -f1)
cat >"$work/image.json" <<JSON
{
  "guest": "$guest",
  "recipe_digest": "$digest",
  "suite": "$suite",
  "mirror": "$mirror",
  "kernel_package": "$kpkg",
  "kernel_release": "$kver",
  "rootfs_sha256": "$img",
  "vmlinuz_sha256": "$(sha256sum "$work/vmlinuz" | cut -d' ' -f1)",
  "initrd_sha256": "$(sha256sum "$work/initrd.img" | cut -d' ' -f1)",
  "build_seconds": $(($(date +%s) - t0)),
  "packages": [$versions]
}
JSON
rm -rf --one-file-system "$tree" "$ird"
mv "$work" "$out.tmp" && mv "$out.tmp" "$out"
trap - EXIT
echo "host_image: built $out (rootfs sha256 $img) in $(($(date +%s) - t0)) s" >&2
echo "$out"
