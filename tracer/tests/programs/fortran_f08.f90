! Fortran test program for the benchlake tracer's `use mpi_f08` bindings, run on N = 4.
! Every rank r:
!   MPI_Irecv 10 integers (40 B) tag 7 from left, MPI_Isend to right, MPI_Waitall
!   (MPI_STATUSES_IGNORE);
!   MPI_Irecv 2 integers (8 B) tag 9 from left, MPI_Isend to right, each completed by
!   MPI_Wait (the receive with a status, checked; neither passes the optional ierror);
!   MPI_Send 3 double precision (24 B) tag 8 to right / MPI_Recv from left with a
!   status, checked (even ranks send first; the Send passes no ierror);
!   MPI_Sendrecv of 6 integers (24 B) tag 14 to right / from left (MPI_STATUS_IGNORE);
!   MPI_Bcast 5 integers from root 0; MPI_Allreduce of 4 integers;
!   MPI_Alltoallv with r+1 integers to every rank; MPI_Init and MPI_Finalize without
!   ierror. A wrong status or result stops the program with an error.
program fortran_f08_test
  use mpi_f08
  implicit none
  integer :: ierr, r, n, right, left, i, got
  type(MPI_Request) :: reqs(2), rq, sq
  type(MPI_Status) :: st
  integer :: a(10), b(10), p(2), q(2), c(4), d(4), e(5), s6(6), r6(6)
  double precision :: x(3), y(3)
  integer, allocatable :: sc(:), sd(:), rc(:), rd(:), sbuf(:), rbuf(:)
  call MPI_Init()
  call MPI_Comm_rank(MPI_COMM_WORLD, r, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, n, ierr)
  right = mod(r + 1, n)
  left = mod(r - 1 + n, n)
  a = r
  call MPI_Irecv(b, 10, MPI_INTEGER, left, 7, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 10, MPI_INTEGER, right, 7, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE, ierr)
  if (any(b /= left)) error stop "isend/irecv data"
  p = r
  call MPI_Irecv(q, 2, MPI_INTEGER, left, 9, MPI_COMM_WORLD, rq)
  call MPI_Isend(p, 2, MPI_INTEGER, right, 9, MPI_COMM_WORLD, sq)
  call MPI_Wait(rq, st)
  if (st%MPI_SOURCE /= left .or. st%MPI_TAG /= 9) error stop "wait status"
  call MPI_Wait(sq, MPI_STATUS_IGNORE)
  x = 1.0d0 + r
  if (mod(r, 2) == 0) then
    call MPI_Send(x, 3, MPI_DOUBLE_PRECISION, right, 8, MPI_COMM_WORLD)
    call MPI_Recv(y, 3, MPI_DOUBLE_PRECISION, left, 8, MPI_COMM_WORLD, st, ierr)
  else
    call MPI_Recv(y, 3, MPI_DOUBLE_PRECISION, left, 8, MPI_COMM_WORLD, st, ierr)
    call MPI_Send(x, 3, MPI_DOUBLE_PRECISION, right, 8, MPI_COMM_WORLD)
  end if
  call MPI_Get_count(st, MPI_DOUBLE_PRECISION, got, ierr)
  if (st%MPI_SOURCE /= left .or. st%MPI_TAG /= 8 .or. got /= 3) error stop "recv status"
  if (any(y /= 1.0d0 + left)) error stop "send/recv data"
  s6 = r
  call MPI_Sendrecv(s6, 6, MPI_INTEGER, right, 14, r6, 6, MPI_INTEGER, left, 14, &
                    MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
  if (any(r6 /= left)) error stop "sendrecv data"
  e = 0
  if (r == 0) e = 42
  call MPI_Bcast(e, 5, MPI_INTEGER, 0, MPI_COMM_WORLD, ierr)
  if (any(e /= 42)) error stop "bcast data"
  c = r
  call MPI_Allreduce(c, d, 4, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (any(d /= n * (n - 1) / 2)) error stop "allreduce data"
  allocate(sc(n), sd(n), rc(n), rd(n), sbuf(n * n), rbuf(n * n))
  sbuf = r
  do i = 1, n
    sc(i) = r + 1
    sd(i) = (i - 1) * n
    rc(i) = i
    rd(i) = (i - 1) * n
  end do
  call MPI_Alltoallv(sbuf, sc, sd, MPI_INTEGER, rbuf, rc, rd, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  do i = 1, n
    if (any(rbuf((i - 1) * n + 1:(i - 1) * n + i) /= i - 1)) error stop "alltoallv data"
  end do
  call MPI_Finalize()
end program fortran_f08_test
